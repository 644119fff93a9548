"""Per-document seeds: with a run seed, each document's random stream depends on (seed, id) only.

That makes a document's rewrite independent of the engine, the number of workers, the batch it
lands in and the order documents finish in, and makes a resumed run redo an interrupted
document exactly as the first attempt would have.
"""

from __future__ import annotations

import hashlib
import json

from tokendp.errors import InvalidInputError, InvalidParameterError

_DOMAIN = b"tokendp.engines.document_seed/v1"


def canonical_id(doc_id: str | int) -> str:
    """The id as JSON text: ``7`` and ``"7"`` stay distinct, equal ids give equal text."""
    if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)):
        raise InvalidInputError(f"a document id must be a string or an integer, got {type(doc_id).__name__}")
    return json.dumps(doc_id, ensure_ascii=False)


def document_seed(seed: int, doc_id: str | int) -> int:
    """A 63-bit seed for document ``doc_id`` under the run seed ``seed``.

    SHA-256 over a domain tag, the seed and the id's canonical text (not Python's ``hash``,
    which is salted per process), so the value is the same on every machine and run.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidParameterError(f"seed must be an integer, got {type(seed).__name__}")
    payload = json.dumps([seed, canonical_id(doc_id)], ensure_ascii=False).encode("utf-8")
    digest = hashlib.sha256(_DOMAIN + b"\0" + payload).digest()
    return int.from_bytes(digest[:8], "big") >> 1
