"""``tokendp vault``: put a corpus into a tenant's vault (docs/vault.md); a reader's commands
(list, rewrite, ask) are in :mod:`tokendp.cli.vault_reader`."""

from __future__ import annotations

import click

from tokendp.cli._common import library_errors, tagger_option
from tokendp.cli._exit import CLIError
from tokendp.cli.serve import DB_HELP, _db


@click.group("vault", short_help="Store documents in a tenant's vault; list, rewrite and ask as a reader.")
def vault() -> None:
    """The vault of `tokendp serve`: documents stored on the server, released to reader keys
    under one lifetime budget per person (docs/vault.md).

    An owner stores documents (tokendp vault add, on the server's database); a reader, with
    its key in $TOKENDP_KEY or --key-file, asks a running server with tokendp vault list,
    rewrite and ask."""


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
    given). Each record is checked as `POST /v1/documents` checks a document (the same schema,
    then the same rules), and the file is stored all or nothing, in one transaction: one bad
    record, or an id the vault holds without --replace, stores nothing and the error names its
    line. The title is PUBLIC (readers see it); the text, spans and subjects are not."""
    from tokendp._optional import require

    require("pydantic", "serve", "tokendp vault add")
    from pydantic import ValidationError

    from tokendp.errors import InvalidInputError
    from tokendp.service.db import open_db
    from tokendp.service.keys import Tenant
    from tokendp.service.schemas import DocumentIn
    from tokendp.service.vault.documents import check_document
    from tokendp.service.vault.store import DocumentExists, VaultStore
    from tokendp.text.documents import jsonl_records

    conn = open_db(_db(db))
    row = conn.execute("SELECT name, budget, delta FROM tenants WHERE name = ?", (tenant,)).fetchone()
    if row is None:
        raise CLIError(f"no tenant {tenant!r} in the database; create it with `tokendp keys create --tenant {tenant}`")
    owner, store = Tenant(row["name"], row["budget"], row["delta"]), VaultStore(lambda: conn)
    documents, lines, seen = [], [], set()
    tag = None
    for where, record in jsonl_records(corpus):
        try:
            body = DocumentIn.model_validate(record)
        except ValidationError as err:
            rules = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'the record'}: {e['msg']}" for e in err.errors())
            raise InvalidInputError(f"{where} does not match the document schema (see /openapi.json): {rules}") from None
        if body.id in seen:
            raise InvalidInputError(f"{where} repeats an id of an earlier line")
        seen.add(body.id)
        spans, state = None if body.spans is None else [s.model_dump() for s in body.spans], "confirmed"
        if spans is None:
            if tag is None:
                from tokendp.text.taggers import get_tagger
                from tokendp.text.taggers import tag as run_tagger

                found = get_tagger(tagger)
                tag = lambda t: [{"start": s.start, "end": s.end, "label": s.label}  # noqa: E731
                                 for s in run_tagger(t, tagger=found)]
            spans, state = tag(body.text), "draft"
        try:
            documents.append((check_document(body.id, body.title, body.text, spans, body.subject), state))
        except InvalidInputError as err:
            raise InvalidInputError(f"{where}: {err}") from None
        lines.append(where)
    try:
        store.put_all(owner, documents, create=not replace)
    except DocumentExists as err:
        raise InvalidInputError(f"{lines[err.index]}: the vault holds this id; pass --replace to replace it") from None
    drafts = sum(state == "draft" for _, state in documents)
    click.echo(f"stored {len(documents)} documents in tenant {tenant}'s vault ({drafts} drafts to confirm)", err=True)


from tokendp.cli.vault_reader import READER_COMMANDS  # noqa: E402

for _command in READER_COMMANDS:
    vault.add_command(_command)
