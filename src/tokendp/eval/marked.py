"""Documents written with their gold spans inline, for tagger evaluation sets written by hand.

A file holds documents, each after a line ``=== doc_id ===``; a gold span is written
``{{LABEL|text}}`` in place (``{{PERSON|Mr F.A. O'Brien}}``), and the text is read with the marks
removed. Spans do not nest. ``benchmarks/tagger_letters/`` holds two such sets (docs/tagging.md).
"""

from __future__ import annotations

import re
from pathlib import Path

from tokendp.errors import InvalidInputError
from tokendp.text.spans import Span

_HEADER = re.compile(r"^=== (\S+) ===$", re.MULTILINE)
_MARK = re.compile(r"\{\{([A-Z]+)\|([^{}|]+)\}\}")


def parse_marked(source: str) -> tuple[dict[str, str], dict[str, list[Span]]]:
    """Texts and gold spans, keyed by doc_id, of the marked-up ``source``."""
    headers = list(_HEADER.finditer(source))
    if not headers:
        raise InvalidInputError("no document header (a line '=== doc_id ===') in the marked-up file")
    texts: dict[str, str] = {}
    gold: dict[str, list[Span]] = {}
    for header, following in zip(headers, headers[1:] + [None], strict=True):
        doc_id = header.group(1)
        if doc_id in texts:
            raise InvalidInputError(f"document {doc_id!r} appears twice in the marked-up file")
        body = source[header.end() + 1:following.start() if following else len(source)].rstrip("\n")
        text, spans, pos = [], [], 0
        length = 0
        for m in _MARK.finditer(body):
            text.append(body[pos:m.start()])
            length += m.start() - pos
            spans.append(Span(length, length + len(m.group(2)), m.group(1), 1.0, "gold"))
            text.append(m.group(2))
            length += len(m.group(2))
            pos = m.end()
        text.append(body[pos:])
        texts[doc_id] = "".join(text)
        if "{{" in texts[doc_id] or "}}" in texts[doc_id]:
            raise InvalidInputError(f"document {doc_id!r} has a malformed mark ('{{{{LABEL|text}}}}')")
        gold[doc_id] = spans
    return texts, gold


def load_marked(path: str | Path) -> tuple[dict[str, str], dict[str, list[Span]]]:
    """:func:`parse_marked` of the UTF-8 file ``path``."""
    file = Path(path)
    if not file.is_file():
        raise InvalidInputError(f"no marked-up file at {file}")
    return parse_marked(file.read_text(encoding="utf-8"))
