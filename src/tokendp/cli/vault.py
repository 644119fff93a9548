"""``tokendp vault``: put a corpus into a tenant's vault (docs/vault.md)."""

from __future__ import annotations

import click

from tokendp.cli._common import library_errors, tagger_option
from tokendp.cli._exit import CLIError
from tokendp.cli.serve import DB_HELP, _db


@click.group("vault", short_help="Store documents in a tenant's vault for readers' releases.")
def vault() -> None:
    """The vault of `tokendp serve`: documents stored on the server, released to reader keys
    under one lifetime budget per person (docs/vault.md)."""


@vault.command("add", short_help="Store the documents of a JSONL corpus.")
@click.argument("corpus", type=click.Path(exists=True, dir_okay=False))
@click.option("--tenant", required=True, help="The tenant whose vault receives the documents (it must exist: "
                                              "`tokendp keys create`).")
@click.option("--replace", is_flag=True, help="Replace documents whose id the vault holds (their units' spend "
                                              "stays); without it such an id is an error and nothing is stored.")
@tagger_option("Tagger for records without \"spans\": their documents are stored as drafts, released only once "
               "the owner confirms the spans (POST /v1/documents/ID/confirm).")
@click.option("--db", "db", metavar="PATH|DSN", default=None, help=DB_HELP)
@library_errors
def add(corpus: str, tenant: str, replace: bool, tagger: str, db: str | None) -> None:
    """Store every record of CORPUS (JSONL: one {"id", "text", "title"?, "spans"?, "subject"?}
    per line; a span is {"start", "end", "label", "subject"?} with offsets into the text as
    given). Every record is checked before anything is stored: one bad record stores nothing.
    The title is PUBLIC (readers see it); the text, spans and subjects are not."""
    from tokendp.errors import InvalidInputError
    from tokendp.service.db import open_db
    from tokendp.service.vault.documents import check_document
    from tokendp.service.keys import Tenant
    from tokendp.service.vault.store import VaultStore
    from tokendp.text.documents import jsonl_records

    conn = open_db(_db(db))
    row = conn.execute("SELECT name, budget, delta FROM tenants WHERE name = ?", (tenant,)).fetchone()
    if row is None:
        raise CLIError(f"no tenant {tenant!r} in the database; create it with `tokendp keys create --tenant {tenant}`")
    owner, store = Tenant(row["name"], row["budget"], row["delta"]), VaultStore(lambda: conn)
    documents, seen = [], set()
    tag = None
    for where, record in jsonl_records(corpus):
        doc_id, text = record.get("id"), record.get("text")
        if not isinstance(doc_id, str) or not doc_id or not isinstance(text, str):
            raise InvalidInputError(f'{where} needs a string "id" and a string "text"')
        if doc_id in seen:
            raise InvalidInputError(f"{where} repeats an id of an earlier line")
        seen.add(doc_id)
        spans, state = record.get("spans"), "confirmed"
        if spans is None:
            if tag is None:
                from tokendp.text.taggers import get_tagger
                from tokendp.text.taggers import tag as run_tagger

                found = get_tagger(tagger)
                tag = lambda t: [{"start": s.start, "end": s.end, "label": s.label}  # noqa: E731
                                 for s in run_tagger(t, tagger=found)]
            spans, state = tag(text), "draft"
        try:
            documents.append((check_document(doc_id, str(record.get("title", "")), text, _spans(spans),
                                             record.get("subject")), state))
        except InvalidInputError as err:
            raise InvalidInputError(f"{where}: {err}") from None
        if not replace and store.get(owner, doc_id) is not None:
            raise InvalidInputError(f"{where}: the vault holds this id; pass --replace to replace it")
    for doc, state in documents:
        store.put(owner, doc, state=state, create=False)
    drafts = sum(state == "draft" for _, state in documents)
    click.echo(f"stored {len(documents)} documents in tenant {tenant}'s vault ({drafts} drafts to confirm)", err=True)


def _spans(spans) -> list[dict]:
    from tokendp.errors import InvalidInputError

    if not isinstance(spans, list) or not all(isinstance(s, dict) and isinstance(s.get("start"), int)
                                              and isinstance(s.get("end"), int) and isinstance(s.get("label"), str)
                                              for s in spans):
        raise InvalidInputError('"spans" must be a list of {"start": int, "end": int, "label": str, "subject"?}')
    return spans
