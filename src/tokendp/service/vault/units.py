"""The vault's protected units: who a span is about (docs/privacy.md, "The vault: one lifetime
filter per unit").

A span with a subject id (its own, else its document's default) belongs to the unit of that
subject, in every document of the tenant; a span without one belongs to the unit (document id,
label). Subject ids are the owner's metadata, never derived from the text. A unit's key is a
string (canonical JSON), the same on every server process that shares the database.
"""

from __future__ import annotations

import json


def unit_key(document: str, label: str, subject: str | None) -> str:
    """The key of the unit a span of ``document`` labelled ``label`` belongs to."""
    if subject is not None:
        return json.dumps(["subject", subject], ensure_ascii=False)
    return json.dumps(["document", document, label], ensure_ascii=False)


def describe(key: str) -> dict[str, str]:
    """A unit key as the owner's ledger shows it: ``{"subject"}`` or ``{"document", "label"}``."""
    kind, *rest = json.loads(key)
    return {"subject": rest[0]} if kind == "subject" else {"document": rest[0], "label": rest[1]}
