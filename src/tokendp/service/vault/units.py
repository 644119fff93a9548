"""The vault's protected units: who a span is about (docs/privacy.md, "The vault: one lifetime
filter per unit").

A span with a subject id (its own, else its document's default) belongs to the unit of that
subject, in every document of the tenant; a span without one belongs to the unit (document id,
label). Subject ids are the owner's metadata, never derived from the text. A unit's key is a
string (canonical JSON), the same on every server process that shares the database.

One person, one id (docs/vault.md, "Subjects"): a subject id is stored and keyed in its
canonical form (:func:`canonical_subject`), so ``"Anna Schmidt "``, ``"anna  schmidt"``,
``"Anna\\u00a0Schmidt"``, ``"Anna Schm\\u200bidt"`` and a decomposed ``"Jürgen"`` are one
subject with one lifetime budget, whichever system the owner loaded them from.
"""

from __future__ import annotations

import json
import unicodedata

from tokendp.errors import InvalidInputError

# Unicode's White_Space property: folded to one space, trimmed.
WHITE_SPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
                        + "".join(map(chr, range(0x2000, 0x200B))))
# Control characters (Cc) that are not white space: refused (NUL cannot be stored by PostgreSQL).
CONTROLS = "".join(chr(c) for c in range(0xA0) if unicodedata.category(chr(c)) == "Cc" and chr(c) not in WHITE_SPACE)
# Format characters (Unicode's Cf up to 15.1: zero-width spaces and joiners, soft hyphens,
# direction marks, BOMs...): removed. As ranges, which the schema's pattern states too; a test
# checks that they hold every Cf character of this Python's unicodedata.
FORMAT_RANGES = ((0x00AD, 0x00AD), (0x0600, 0x0605), (0x061C, 0x061C), (0x06DD, 0x06DD), (0x070F, 0x070F),
                 (0x0890, 0x0891), (0x08E2, 0x08E2), (0x180E, 0x180E), (0x200B, 0x200F), (0x202A, 0x202E),
                 (0x2060, 0x2064), (0x2066, 0x206F), (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD),
                 (0x110CD, 0x110CD), (0x13430, 0x1343F), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
                 (0xE0001, 0xE0001), (0xE0020, 0xE007F))
_FORMATS = {c: None for a, b in FORMAT_RANGES for c in range(a, b + 1)}  # str.translate: remove


def canonical_subject(subject: str) -> str:
    """``subject`` in its one stored form: format characters removed, Unicode NFKC, case folded
    (``str.casefold``), white space trimmed and inner runs collapsed to one space, repeated
    until stable. Folding case merges ids that differ only in case: two people's ids that
    differ only in case then share one budget, which bounds each of them by it (more protection,
    never less); a person with two ids that differ in case never gets two budgets.
    InvalidInputError for a control character (other than white space) or an id that is empty
    once canonical; the message names neither the id nor its characters beyond their code."""
    bad = sorted({c for c in subject if c in CONTROLS})
    if bad:
        raise InvalidInputError(f"a subject id may not hold control characters ({', '.join(f'U+{ord(c):04X}' for c in bad)}); "
                                "ids are letters, digits, punctuation and spaces")
    text, previous = subject, None
    while text != previous:
        previous = text
        text = unicodedata.normalize("NFKC", text.translate(_FORMATS)).casefold()
        text = " ".join(unicodedata.normalize("NFKC", text).split())
    if not text:
        raise InvalidInputError("a subject id is empty once white space and invisible characters are removed")
    return text


def unit_key(document: str, label: str, subject: str | None) -> str:
    """The key of the unit a span of ``document`` labelled ``label`` belongs to (``subject`` as
    stored: canonical, :func:`canonical_subject`)."""
    if subject is not None:
        return subject_key(subject)
    return json.dumps(["document", document, label], ensure_ascii=False)


def subject_key(subject: str) -> str:
    """The key of a subject's unit, in every document of the tenant."""
    return json.dumps(["subject", subject], ensure_ascii=False)


def describe(key: str) -> dict[str, str]:
    """A unit key as the owner's ledger shows it: ``{"subject"}`` or ``{"document", "label"}``."""
    kind, *rest = json.loads(key)
    return {"subject": rest[0]} if kind == "subject" else {"document": rest[0], "label": rest[1]}
