"""``tokendp serve`` and ``tokendp keys``: the service with a durable privacy budget."""

from __future__ import annotations

import os

import click

from tokendp import __version__
from tokendp.cli._common import library_errors, tagger_option, threads_option, use_threads
from tokendp.cli._console import quiet_libraries

DEFAULT_DB = "tokendp-service.db"
DB_HELP = ("The database holding tenants, key hashes, every unit's charges and the vault's documents: a SQLite "
           "file (WAL mode; created, or tightened, to mode 0600, owner only), or a PostgreSQL server "
           "(postgresql://user:password@host:5432/dbname, needs the postgres extra) that server processes on "
           "several hosts share; its password is masked in every message "
           f"[default: $TOKENDP_DB, else ./{DEFAULT_DB}].")


def _db(path: str | None) -> str:
    return path or os.environ.get("TOKENDP_DB") or DEFAULT_DB


@click.command("serve", short_help="Serve the HTTP API with a durable budget per document and group.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to listen on. The default is loopback only; put a TLS proxy in front for anything else.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--db", "db", metavar="PATH|DSN", default=None, help=DB_HELP)
@click.option("--model", default="rewriter", show_default=True,
              help="The model that rewrites (/v1/sanitize, /v1/synthesize, the vault's rewrites): rewriter, "
                   "smollm2, tiny, a directory or a hub id.")
@click.option("--answer-model", default=None,
              help="The model that answers (/v1/generate, /v1/ask) [default: smollm2 when --model is rewriter, "
                   "whose adapter rewrites rather than answers; else --model itself]. Loaded beside --model "
                   "unless it is the same.")
@tagger_option("Tagger for /v1/tag and for requests that give no spans.")
@click.option("--max-body-bytes", type=click.IntRange(min=1), default=1_000_000, show_default=True,
              help="Larger request bodies are refused (413 body_too_large): the bytes received are counted, "
                   "whatever the framing (Content-Length or chunked). A request with both Content-Length and "
                   "Transfer-Encoding is refused (400 ambiguous_length).")
@click.option("--max-new-tokens", type=click.IntRange(min=1, max=1_000_000), default=512, show_default=True,
              help="Most tokens (T) one request may ask for; T is charged in full to the budget.")
@click.option("--rate-limit", type=click.IntRange(min=1), default=60, show_default=True,
              help="Requests per minute per tenant, all its owner keys together, and per reader key "
                   "(429 rate_limited above it).")
@click.option("--max-auth-failures", type=click.IntRange(min=1), default=10, show_default=True,
              help="Failed authentication attempts (a key that matches none) per client address per minute; "
                   "above it every /v1 request from that address is refused (429 auth_rate_limited, with "
                   "Retry-After) before its key is looked up.")
@click.option("--max-tag-chars", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="Most characters one /v1/tag request may hold (413 text_too_long above it); tagging runs in "
                   "its own process, beside the model.")
@click.option("--max-batch", type=click.IntRange(min=1), default=8, show_default=True,
              help="Most documents batched onto the model in one forward pass.")
@click.option("--docs", is_flag=True,
              help="Also serve the Swagger UI at /docs and ReDoc at /redoc. They load their scripts from a CDN "
                   "into this origin, where the page keeps the API key: off unless you trust that CDN. "
                   "The OpenAPI schema is always at /openapi.json.")
@click.option("--vault-lease", type=click.FloatRange(min=1), default=30.0, show_default=True,
              help="Seconds after this process's last heartbeat (on the database's clock) when its vault tickets "
                   "expire: a release waiting behind a killed server waits at most this long; one that had "
                   "reserved stays spent in full. Must exceed any stall of the process.")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info"]), default="info",
              show_default=True)
@threads_option
@library_errors
def serve(host: str, port: int, db: str | None, model: str, answer_model: str | None, tagger: str,
          max_body_bytes: int, max_new_tokens: int, rate_limit: int, max_auth_failures: int, max_tag_chars: int,
          max_batch: int, docs: bool, vault_lease: float, log_level: str, threads: int | None) -> None:
    """Serve the HTTP API and the web page (OpenAPI schema at /openapi.json, Swagger UI with --docs).

    Every /v1 call needs `Authorization: Bearer KEY` (make one with `tokendp keys create`).
    Each (tenant, document id, privacy group) has the tenant's lifetime budget: a request
    reserves its worst-case epsilon for every unit before generating and is refused (403) if
    any unit would exceed it; reservations are never refunded, a crash included. Semantics:
    docs/service.md. Document text never goes to the logs.

    The vault (docs/vault.md): owner keys store documents (POST /v1/documents, `tokendp vault
    add`); reader keys list them and ask for rewrites (GET /v1/documents/ID/rewrite), never
    seeing the text. Every subject (or document and label) has ONE lifetime budget across all
    releases, spent through a Renyi filter; a spent budget never refuses a release. Releases of
    one unit reserve in the order they arrive, across every server process on the database
    (with --db postgresql://..., on several hosts).
    """
    from tokendp._optional import require

    require("fastapi", "serve", "tokendp serve")
    uvicorn = require("uvicorn", "serve", "tokendp serve")
    from tokendp.service.app import create_app
    from tokendp.service.limits import Limits

    quiet_libraries()
    use_threads(threads)
    limits = Limits(max_body_bytes=max_body_bytes, max_new_tokens=max_new_tokens, requests_per_minute=rate_limit,
                    max_batch=max_batch, max_tag_chars=max_tag_chars, auth_failures_per_minute=max_auth_failures)
    app = create_app(_db(db), model=model, tagger=tagger, limits=limits, version=__version__, docs=docs,
                     vault_lease=vault_lease, answer_model=answer_model)
    # h11, the parser tested here: httptools would answer some framing errors itself, in plain text, not JSON
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, http="h11")
    server = _server_class(uvicorn)(config, app.cancel_jobs)
    try:
        server.run()
    except KeyboardInterrupt:  # re-raised by uvicorn once it has shut down (as uvicorn.run does)
        pass
    if not server.started:
        raise SystemExit(3)  # uvicorn's STARTUP_FAILURE: the port is taken, or start-up failed


def _server_class(uvicorn):
    """uvicorn's server, but the first SIGINT or SIGTERM also cancels every job at its next token
    (each answered 503 shutting_down), so that shutting down does not wait for them to reach T
    (docs/service.md, "Disconnects and stopping the server")."""

    class Server(uvicorn.Server):
        def __init__(self, config, cancel_jobs) -> None:
            super().__init__(config)
            self.cancel_jobs = cancel_jobs

        def handle_exit(self, sig, frame) -> None:
            if not self.should_exit:
                self.cancel_jobs()
            super().handle_exit(sig, frame)

    return Server


@click.group("keys", short_help="Tenants and their API keys for serve.")
def keys() -> None:
    """Tenants and their API keys (the database keeps only each key's SHA-256)."""


@keys.command("create", short_help="Create an API key for a tenant and print it once.")
@click.option("--tenant", required=True, help="The tenant (created on first use): 1-64 letters, digits, - _ .")
@click.option("--budget", type=float, default=None,
              help="A new tenant's lifetime epsilon per protected unit (document id, privacy group) [default: 10]. "
                   "Fixed once the tenant exists.")
@click.option("--delta", type=float, default=None,
              help="The delta a new tenant's budget refers to [default: 1e-5]. Fixed once the tenant exists.")
@click.option("--role", type=click.Choice(["owner", "reader"]), default="owner", show_default=True,
              help="owner: everything (documents, ledger, quotas, the per-request API); reader: only lists the "
                   "vault's documents and asks for their releases, never sees their text (docs/vault.md).")
@click.option("--db", "db", metavar="PATH|DSN", default=None, help=DB_HELP)
@library_errors
def create(tenant: str, budget: float | None, delta: float | None, role: str, db: str | None) -> None:
    """Create an API key for the tenant and print it once (it cannot be shown again). The
    tenant's budget is also each vault unit's lifetime epsilon (a subject, or a document and
    label, across every release)."""
    from tokendp.service.db import open_db
    from tokendp.service.keys import create_key

    key, t = create_key(open_db(_db(db)), tenant, budget=budget, delta=delta, role=role)
    click.echo(key)
    click.echo(f"tenant {t.name} ({role} key): budget epsilon {t.budget:g} per (document id, privacy group), and per "
               f"vault unit for its lifetime, at delta {t.delta:g}; store the key now, it is not kept", err=True)


@keys.command("list", short_help="List the keys: prefix, tenant, role, creation time.")
@click.option("--db", "db", metavar="PATH|DSN", default=None, help=DB_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print [{prefix, tenant, role, created, budget, delta}] as JSON.")
@library_errors
def list_(db: str | None, as_json: bool) -> None:
    """List the keys: their first characters, tenant, role and creation time (never the key)."""
    import json

    from tokendp.service.db import open_db
    from tokendp.service.keys import list_keys

    rows = list_keys(open_db(_db(db)))
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(f"{'prefix':<12}{'tenant':<20}{'role':<8}{'created':<27}budget (epsilon at delta)")
    for r in rows:
        click.echo(f"{r['prefix']:<12}{r['tenant']:<20}{r['role']:<8}{r['created']:<27}{r['budget']:g} at {r['delta']:g}")


@keys.command("revoke", short_help="Revoke the key that starts with PREFIX.")
@click.argument("prefix")
@click.option("--db", "db", metavar="PATH|DSN", default=None, help=DB_HELP)
@library_errors
def revoke(prefix: str, db: str | None) -> None:
    """Revoke the key that starts with PREFIX (as `tokendp keys list` shows it). The tenant's
    budgets and charges stay; a new key for the tenant continues them."""
    from tokendp.service.db import open_db
    from tokendp.service.keys import revoke_key

    tenant = revoke_key(open_db(_db(db)), prefix)
    click.echo(f"revoked key {prefix}... of tenant {tenant}")
