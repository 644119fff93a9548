"""A reader's client of a served vault (docs/vault.md), shared by the LangChain and LlamaIndex
retrievers: the confirmed documents' public releases, ranked against a query.

What a reader may call is all it calls: ``GET /v1/documents`` (ids and public titles) and
``GET /v1/documents/{id}/rewrite`` (a DP-Fusion rewrite and its certificate). The server makes
a rewrite once per (document version, parameters) and returns it again at no cost, so the
first search at given parameters releases every document it reads once, charged to each of its
units' lifetime budgets (and to the reader's quota), and later searches at the same parameters
charge nothing. Ranking is BM25 over the rewrites, here (the server's own retrieval, over public
versions, answers ``/v1/ask`` only): post-processing of releases, which costs no privacy.

The key comes from ``key_file`` (its first line) or the ``TOKENDP_KEY`` environment variable;
it is sent in the Authorization header only, and appears in no message, log or ``repr``.
Every failure is a :class:`~tokendp.errors.TokenDPError` naming the server's error code and
message (which never carry document text), or the address that could not be reached.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokendp._optional import require
from tokendp.errors import BudgetExceededError, InvalidInputError, InvalidParameterError, TokenDPError

DEFAULT_URL = "http://127.0.0.1:8000"
# The server's error code -> the tokendp error a caller catches.
_ERRORS: dict[str, type[TokenDPError]] = {
    "invalid_parameter": InvalidParameterError, "invalid_request": InvalidParameterError,
    "invalid_input": InvalidInputError, "not_found": InvalidInputError, "budget_exceeded": BudgetExceededError,
}


@dataclass(frozen=True)
class Release:
    """One document's public release: its id, public title, rewrite, certificate (the report),
    the tenant's lifetime guarantee, whether the server returned a stored rewrite, and its BM25
    score against the query."""

    id: str
    title: str
    text: str
    report: dict[str, Any]
    lifetime: dict[str, Any]
    cached: bool
    score: float

    def metadata(self) -> dict[str, Any]:
        """What a framework's document carries besides the text: everything public."""
        return {"id": self.id, "title": self.title, "certificate": self.report, "lifetime": self.lifetime,
                "cached": self.cached, "score": self.score}


def read_key(key_file: str | Path | None) -> str:
    """The reader key: the first line of ``key_file``, else ``$TOKENDP_KEY``."""
    if key_file is not None:
        try:
            lines = Path(key_file).read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise InvalidInputError(f"key file not found: {key_file}") from None
        except (OSError, UnicodeDecodeError) as err:
            raise InvalidInputError(f"cannot read the key file {key_file} ({type(err).__name__})") from None
        key = lines[0].strip() if lines else ""
        if not key:
            raise InvalidInputError(f"the key file {key_file} is empty; its first line is the key")
        return key
    key = os.environ.get("TOKENDP_KEY", "").strip()
    if not key:
        raise InvalidParameterError("no vault key: set TOKENDP_KEY to a reader key (tokendp keys create --role "
                                    "reader) or pass key_file=")
    return key


def check_search(epsilon: float, k: int, max_new_tokens: int | None, documents: list[str] | None) -> None:
    """The retrievers' parameters, checked when they are built (the server checks them again)."""
    if documents is not None and (isinstance(documents, str)
                                  or not all(isinstance(d, str) and d for d in documents)):
        raise InvalidParameterError("documents must be a list of document ids (strings), or None for every "
                                    "confirmed document")
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not epsilon >= 0:
        raise InvalidParameterError(f"epsilon (each unit's, per release) must be a number >= 0, got {epsilon!r}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidParameterError(f"k (how many documents to return) must be an integer >= 1, got {k!r}")
    if max_new_tokens is not None and (isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int)
                                       or max_new_tokens < 1):
        raise InvalidParameterError(f"max_new_tokens must be an integer >= 1 or None, got {max_new_tokens!r}")


class VaultClient:
    """A reader's HTTP client of the vault at ``url`` (default ``$TOKENDP_URL``, else
    :data:`DEFAULT_URL`); ``timeout`` in seconds per request (a fresh rewrite generates)."""

    def __init__(self, url: str | None = None, *, key_file: str | Path | None = None,
                 timeout: float = 600.0, what: str = "the vault retriever", extra: str = "langchain") -> None:
        httpx = require("httpx", extra, what)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise InvalidParameterError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        self.url = (url or os.environ.get("TOKENDP_URL") or DEFAULT_URL).rstrip("/")
        if not self.url.startswith(("http://", "https://")):
            raise InvalidParameterError(f"the vault's url must start with http:// or https://, got {self.url!r}")
        self._what, self._extra = what, extra
        self._http = httpx.Client(base_url=self.url, timeout=timeout,
                                  headers={"Authorization": f"Bearer {read_key(key_file)}"})
        self._transport_error = httpx.TransportError

    def __repr__(self) -> str:
        return f"VaultClient(url={self.url!r})"

    def _get(self, path: str, **params: Any) -> Any:
        try:
            reply = self._http.get(path, params={k: v for k, v in params.items() if v is not None})
        except self._transport_error as err:
            raise TokenDPError(f"cannot reach the vault at {self.url} ({type(err).__name__}); is tokendp serve "
                               "running there?") from None
        try:
            body = reply.json()
        except ValueError:
            body = None
        if reply.status_code != 200:
            error = body.get("error", {}) if isinstance(body, dict) else {}
            code = error.get("code", "http_error")
            raise _ERRORS.get(code, TokenDPError)(
                f"the vault at {self.url} answered {reply.status_code} {code}: {error.get('message', reply.reason_phrase)}")
        if body is None:
            raise TokenDPError(f"the vault at {self.url} answered {path} with something that is not JSON; is it "
                               "tokendp serve?")
        return body

    def search(self, query: str, *, epsilon: float, k: int, max_new_tokens: int | None = None,
               documents: list[str] | None = None) -> list[Release]:
        """The ``k`` releases that best match ``query`` (BM25 score > 0, best first, ties by id),
        among ``documents`` (ids; default: every confirmed document the key can list), each a
        rewrite at ``epsilon`` per unit with ``max_new_tokens`` (T; None: the server's default)."""
        if not isinstance(query, str):
            raise InvalidInputError(f"a query is a string, got a {type(query).__name__}")
        require("bm25s", self._extra, self._what, why="to rank the releases")
        from tokendp.service.vault.retrieval import Index
        from tokendp.service.vault.store import StoredDocument

        titles = {d["id"]: d.get("title", "") for d in self._get("/v1/documents")["documents"]}
        ids = sorted(titles) if documents is None else sorted(set(documents))
        by_id = {id: self._get(f"/v1/documents/{_quote(id)}/rewrite", epsilon=epsilon, max_new_tokens=max_new_tokens)
                 for id in ids}
        index = Index.build([StoredDocument(id, "", "", by_id[id]["text"], (), None, "confirmed") for id in ids])
        scores = _scores(index, query)
        best = sorted((id for id in ids if scores[id] > 0), key=lambda id: (-scores[id], id))[:k]
        return [Release(id, titles.get(id, ""), by_id[id]["text"], by_id[id]["report"], by_id[id]["lifetime"],
                        bool(by_id[id].get("cached")), scores[id]) for id in best]


def _scores(index: Any, query: str) -> dict[str, float]:
    """Each indexed document's BM25 score against ``query`` (0 for a query with no known term)."""
    ids = [id for id, _ in index.versions]
    vocab = index.tokenizer.get_vocab_dict() if index.model is not None else {}
    words = [] if not vocab else index.tokenizer.tokenize([query], update_vocab=False, return_as="string",
                                                          show_progress=False)[0]
    terms = [vocab[w] for w in words if w and w in vocab]
    if not terms:
        return dict.fromkeys(ids, 0.0)
    return {id: float(s) for id, s in zip(ids, index.model.get_scores(terms))}


def _quote(id: str) -> str:
    from urllib.parse import quote

    return quote(id, safe="")
