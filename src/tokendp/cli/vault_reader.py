"""``tokendp vault list``, ``vault rewrite ID`` and ``vault ask QUESTION``: a reader's command
line over a served vault (docs/vault.md, "Readers on the command line").

A client of the vault's HTTP API on the standard library (urllib), so that a reader needs
tokendp alone, not the serve extra: ``GET /v1/documents``, and the releases
``GET /v1/documents/{id}/rewrite`` and ``POST /v1/ask`` asked as server-sent events, so that
the tokens are counted on stderr as they come (counts only); their ``result`` event is the
answer a plain request gets, printed with its certificate.

The key comes from ``$TOKENDP_KEY`` or ``--key-file``, never from an argument (``ps`` shows a
process's arguments to every user of the machine); it goes only into the Authorization header,
never follows a redirect, and never appears in a message. An error answer becomes one of the
CLI's exit codes by its code (:data:`EXITS`), with the server's message, which never carries
document text; a server that cannot be reached or cannot answer now is exit code 6.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import click

from tokendp import __version__
from tokendp.cli._common import echo_json
from tokendp.cli._console import TokenProgress, console
from tokendp.cli._exit import (EXIT_BAD_INPUT, EXIT_BUDGET, EXIT_ERROR, EXIT_SERVICE, EXIT_USAGE, BadInputError,
                               CLIError, Interrupted)

KEY_ENV, URL_ENV = "TOKENDP_KEY", "TOKENDP_URL"
DEFAULT_URL = "http://127.0.0.1:8000"  # `tokendp serve`'s default address
DEFAULT_TIMEOUT = 300.0
LOOPBACK = ("127.0.0.1", "::1", "localhost")

# The server's error code (docs/service.md, the codes of the API) -> (exit code, what to do). A code
# not here is exit code 6 from a 5xx status, else 1.
EXITS: dict[str, tuple[int, str]] = {
    "unauthorized": (EXIT_USAGE, f"check ${KEY_ENV} or --key-file: the server holds no such key"),
    "forbidden": (EXIT_USAGE, ""),
    "invalid_request": (EXIT_USAGE, ""),
    "invalid_parameter": (EXIT_USAGE, ""),
    "body_too_large": (EXIT_USAGE, ""),
    "invalid_input": (EXIT_BAD_INPUT, ""),
    "not_found": (EXIT_BAD_INPUT, "`tokendp vault list` shows the documents this key may read"),
    "no_match": (EXIT_BAD_INPUT, ""),
    "quota_exceeded": (EXIT_BUDGET, ""),
    "budget_exceeded": (EXIT_BUDGET, ""),
    "rate_limited": (EXIT_SERVICE, ""),
    "auth_rate_limited": (EXIT_SERVICE, ""),
}


def refusal(status: int | None, body: Any, retry_after: str | None = None) -> CLIError:
    """The CLI error of an error answer: ``body`` the API's ``{"error": {"code", "message", ...}}``
    (of a status, or of a stream's ``error`` event: ``status`` None), by its code."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("code"), str):
        return CLIError(f"the server answered HTTP {status} without tokendp's error body: is --url a tokendp "
                        "server?", EXIT_SERVICE if status is None or status >= 500 else EXIT_ERROR)
    code, message = error["code"], str(error.get("message", ""))
    exit_code, hint = EXITS.get(code, (EXIT_SERVICE if status is None or status >= 500 else EXIT_ERROR, ""))
    fields = error.get("fields")
    if isinstance(fields, list):  # 422: the fields and rules (never the values given)
        message += ": " + "; ".join(f"{f.get('field')}: {f.get('rule')}" for f in fields if isinstance(f, dict))
    parts = [f"{message} ({'' if status is None else f'{status} '}{code})", hint]
    if retry_after:
        parts.append(f"retry in {retry_after} s")
    return CLIError("; ".join(p for p in parts if p), exit_code)


@dataclass(frozen=True)
class Vault:
    """A served vault at ``url`` (scheme and host, no path), asked with ``key``; ``timeout``: the
    seconds the server may send nothing before the command gives up."""

    url: str
    key: str
    timeout: float

    def call(self, method: str, path: str) -> Any:
        """The JSON answer of ``method path``."""
        with self._open(method, path, accept="application/json") as response:
            return self._read(lambda: json.load(response))

    def release(self, method: str, path: str, progress: TokenProgress, *, query: dict[str, Any] | None = None,
                body: dict[str, Any] | None = None) -> dict[str, Any]:
        """A release asked as server-sent events: its answer (the ``result`` event), each ``token``
        event counted on ``progress`` (one per token released, bar a character whose bytes span
        two tokens, which comes as one); an ``error`` event is raised as :func:`refusal`."""
        try:
            with self._open(method, path, query=query, body=body, accept="text/event-stream") as response:
                for name, data in self._read(lambda: list(_events(response, progress))):
                    if name == "result":
                        return data
                    if name == "error":
                        raise refusal(None, data)
        except KeyboardInterrupt:
            raise Interrupted("interrupted: the connection is closed and the server stops the release; the tokens "
                              "it sampled stay charged") from None
        raise CLIError("the server closed the stream before the release's result (what it sampled stays charged); "
                       "see its log", EXIT_SERVICE)

    def _open(self, method: str, path: str, *, accept: str, query: dict[str, Any] | None = None,
              body: dict[str, Any] | None = None) -> Any:
        from http.client import HTTPException
        from urllib.error import HTTPError, URLError
        from urllib.request import Request

        url = self.url + path + ("?" + urlencode(query) if query else "")
        headers = {"Authorization": f"Bearer {self.key}", "Accept": accept, "User-Agent": f"tokendp/{__version__}"}
        data = None
        if body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode("utf-8"), "application/json"
        try:
            return _opener().open(Request(url, data=data, headers=headers, method=method), timeout=self.timeout)
        except HTTPError as err:
            if 300 <= err.code < 400:
                raise CLIError(f"the server answered a redirect ({err.code}); the key is never sent on to another "
                               "address: give --url the address that answers", EXIT_ERROR) from None
            try:
                answer = json.loads(err.read().decode("utf-8"))
            except ValueError:
                answer = None
            raise refusal(err.code, answer, err.headers.get("Retry-After")) from None
        except (URLError, OSError, HTTPException) as err:
            raise self._unreachable(getattr(err, "reason", err)) from None

    def _read(self, read: Callable[[], Any]) -> Any:
        """``read()`` of an open answer, a server that stops sending (or closes) before the end
        being exit code 6."""
        from http.client import HTTPException

        try:
            return read()
        except (OSError, ValueError, HTTPException) as err:
            raise self._unreachable(err) from None

    def _unreachable(self, reason: Any) -> CLIError:
        if isinstance(reason, TimeoutError):
            return CLIError(f"{self.url} sent nothing for {self.timeout:g} s (--timeout); the server may be busy",
                            EXIT_SERVICE)
        if isinstance(reason, ValueError):
            return CLIError(f"{self.url} sent an answer that is not tokendp's (is --url a tokendp server?)",
                            EXIT_SERVICE)
        why = getattr(reason, "strerror", None) or str(reason)
        return CLIError(f"cannot reach {self.url} ({why}): is `tokendp serve` running at {self.url}? (--url, "
                        f"${URL_ENV})", EXIT_SERVICE)


def _opener() -> Any:
    """urllib's opener without redirects: urllib would send the Authorization header on to
    wherever a redirect points."""
    from urllib.request import HTTPRedirectHandler, build_opener

    class NoRedirect(HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    return build_opener(NoRedirect)


def _events(response: Any, progress: TokenProgress) -> Iterator[tuple[str, Any]]:
    """The server-sent events of ``response`` as (name, JSON data), a ``token`` counted on
    ``progress`` as it comes, its text dropped (the result holds the whole text)."""
    name, data = "message", []
    for raw in response:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and data:
            if name == "token":
                progress.count()
            else:
                yield name, json.loads("\n".join(data))
            name, data = "message", []


def read_key(key_file: Path | None) -> str:
    """The key: the one line of ``key_file`` (warned if other users may read it), else
    ``$TOKENDP_KEY``. Never echoed, whatever is wrong with it."""
    if key_file is not None:
        try:
            text, mode = key_file.read_text(encoding="utf-8"), key_file.stat().st_mode
        except (OSError, UnicodeDecodeError) as err:
            raise BadInputError(f"cannot read --key-file {key_file}: {getattr(err, 'strerror', None) or 'not UTF-8'}"
                                ) from None
        if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
            console().warn(f"--key-file {key_file} can be read by other users (mode {stat.S_IMODE(mode):o}): "
                           f"chmod 600 {key_file}")
        key, where = text.strip(), f"--key-file {key_file}"
    else:
        key, where = os.environ.get(KEY_ENV, "").strip(), f"${KEY_ENV}"
        if not key:
            raise CLIError(f"no key: set ${KEY_ENV}, or pass --key-file PATH (a file holding the key; never the key "
                           "itself on the command line, where `ps` shows it)")
    if not key or not key.isascii() or not key.isprintable() or " " in key:
        raise BadInputError(f"{where} must hold one API key on one line (as `tokendp keys create` prints it)")
    return key


def open_vault(url: str, key_file: Path | None, timeout: float) -> Vault:
    """The vault at ``url`` (checked, warned if the key would cross a network unencrypted) with
    the key of :func:`read_key`."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment \
            or parts.username is not None or not url.strip().isprintable():
        raise CLIError(f"--url must be http(s)://HOST[:PORT], the address `tokendp serve` listens on, got {url!r}")
    if parts.scheme == "http" and parts.hostname not in LOOPBACK:
        console().warn(f"the key goes to {parts.hostname} unencrypted: use https (a TLS proxy in front of "
                       "`tokendp serve`, docs/security.md)")
    return Vault(url.strip().rstrip("/"), read_key(key_file), timeout)


def server_options(command: Callable) -> Callable:
    """``--url``, ``--key-file``, ``--timeout`` and ``--json``: where the vault is, the key, and
    how its answer is printed."""
    options = [
        click.option("--url", default=DEFAULT_URL, show_default=True, envvar=URL_ENV, show_envvar=True,
                     help="The address `tokendp serve` listens on (https past this machine)."),
        click.option("--key-file", type=click.Path(path_type=Path, dir_okay=False), default=None,
                     help=f"A file holding the API key (mode 600) [default: the key in ${KEY_ENV}]. The key is "
                          "never an argument: `ps` shows arguments to every user of the machine."),
        click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_TIMEOUT,
                     show_default=True, help="Seconds the server may send nothing before the command gives up "
                                             "(a release may first wait for earlier releases of its people)."),
        click.option("--json", "as_json", is_flag=True, help="Print the server's JSON answer as it is."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _printable(text: str) -> str:
    """A public title or id as a terminal shows it: control characters (an escape sequence) as �."""
    return "".join(c if c.isprintable() else "\ufffd" for c in text)


def lifetime_lines(body: dict[str, Any]) -> list[str]:
    """What a release's answer says beside its certificate: the lifetime guarantee, and whether it
    was a stored rewrite returned again."""
    life = body["lifetime"]
    lines = [f"lifetime: epsilon {life['epsilon']:g} at delta {life['delta']:g} for each unit, {life['unit']} "
             f"(alpha {life['alpha']:g}, RDP budget B {life['budget']:.4g})"]
    if body.get("cached"):
        lines.append("cached: a rewrite made before, returned again at no cost to anyone's budget")
    return lines


@click.command("list", short_help="List the documents a key may read (a served vault).")
@server_options
def list_documents(url: str, key_file: Path | None, timeout: float, as_json: bool) -> None:
    """List the vault's documents this key may read: ids and public titles (an owner key: every
    document, with its state). Asks GET /v1/documents of a running `tokendp serve`."""
    answer = open_vault(url, key_file, timeout).call("GET", "/v1/documents")
    if as_json:
        echo_json(answer)
        return
    documents = answer.get("documents", [])
    if not documents:
        console().info("no document this key may read")
        return
    width = max(len("id"), *(len(_printable(d["id"])) for d in documents))
    states = any("state" in d for d in documents)
    click.echo(f"{'id':<{width}}  " + ("state      " if states else "") + "title")
    for d in documents:
        click.echo(f"{_printable(d['id']):<{width}}  " + (f"{d.get('state', ''):<11}" if states else "")
                   + _printable(d.get("title", "")))


@click.command("rewrite", short_help="A DP rewrite of a stored document, with its certificate.")
@click.argument("document_id", metavar="ID")
@click.option("--epsilon", type=float, required=True,
              help="Each unit's epsilon for this release, at the tenant's delta; the lifetime budget bounds all "
                   "releases about a unit together.")
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=None,
              help="T [default: the server's, from the document; at most the server's --max-new-tokens].")
@server_options
def rewrite(document_id: str, epsilon: float, max_new_tokens: int | None, url: str, key_file: Path | None,
            timeout: float, as_json: bool) -> None:
    """A DP-Fusion rewrite of the stored document ID, and its certificate: one group per unit
    (unit-001, ...) and the lifetime guarantee. Made once per document version and parameters,
    then returned again at no cost ("cached"). Asks GET /v1/documents/ID/rewrite of a running
    `tokendp serve`."""
    vault = open_vault(url, key_file, timeout)
    query = {"epsilon": epsilon, "stream": "true", **({} if max_new_tokens is None else
                                                      {"max_new_tokens": max_new_tokens})}
    with console().tokens(f"asking {vault.url} for a rewrite of {_printable(document_id)} (epsilon {epsilon:g} per "
                          "unit)", max_new_tokens, desc="rewrite", as_json=as_json) as progress:
        body = vault.release("GET", f"/v1/documents/{quote(document_id, safe='')}/rewrite", progress, query=query)
    if as_json:
        echo_json(body)
        return
    from tokendp.cli.sanitize import format_report

    report = {k: v for k, v in body["report"].items() if k != "spans_source"}  # the owner's spans
    click.echo("\n".join([body["text"].strip(), "", format_report(report), *lifetime_lines(body)]))


@click.command("ask", short_help="Ask a question of the stored documents, with a DP answer.")
@click.argument("question")
@click.option("--epsilon", type=float, required=True,
              help="Each unit's epsilon for this answer, at the tenant's delta; the lifetime budget bounds all "
                   "releases about a unit together.")
@click.option("--document", "documents", multiple=True, metavar="ID",
              help="A document to read (repeat, up to 8, read in this order) [default: the ones whose PUBLIC "
                   "versions, spans hidden, best match the question].")
@click.option("--top-k", type=click.IntRange(1, 8), default=None,
              help="How many documents retrieval reads [default: 3]; not with --document.")
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=None,
              help="T [default: 128, or the server's --max-new-tokens if lower].")
@click.option("--temperature", type=float, default=None, help="Sampling temperature [default: the server's, 0.7].")
@server_options
def ask(question: str, epsilon: float, documents: tuple[str, ...], top_k: int | None, max_new_tokens: int | None,
        temperature: float | None, url: str, key_file: Path | None, timeout: float, as_json: bool) -> None:
    """Answer QUESTION (public: it is sent, never stored) from the vault's documents with
    DP-Fusion, each unit under its lifetime budget, and print the answer, its certificate and
    the documents read. Every answer is a new release, charged and counted against the key's
    quota. Asks POST /v1/ask of a running `tokendp serve`."""
    if documents and top_k is not None:
        raise CLIError("give --document (the ones to read) or --top-k (how many to retrieve), not both")
    vault = open_vault(url, key_file, timeout)
    request = {"question": question, "epsilon": epsilon, "stream": True,
               **{k: v for k, v in (("documents", list(documents) or None), ("top_k", top_k),
                                    ("max_new_tokens", max_new_tokens), ("temperature", temperature))
                  if v is not None}}
    which = f"{len(documents)} named documents" if documents else "the documents retrieval finds"
    with console().tokens(f"asking {vault.url} for an answer from {which} (epsilon {epsilon:g} per unit)",
                          max_new_tokens, desc="ask", as_json=as_json) as progress:
        body = vault.release("POST", "/v1/ask", progress, body=request)
    if as_json:
        echo_json(body)
        return
    from tokendp.cli.generate import format_generate_report

    read = ", ".join(_printable(d) for d in body.get("documents", []))
    click.echo("\n".join([body["text"].strip(), "", format_generate_report(body["report"]),
                          f"read: {read} ({'named' if documents else 'retrieved from their public versions'})",
                          *lifetime_lines(body)]))


READER_COMMANDS = (list_documents, rewrite, ask)
