"""CRF spans that name no one: a bare generic reference to a body, or a function word alone.

In a judgment "the Government" and "the Court" are the respondent State and the ECHR, named in
full elsewhere; a word such as "the", "and" or "between" alone is a fragment of the CRF's low
threshold. Neither identifies anyone, and on TAB's tuning half (out-of-fold CRF) the 92 spans
"Government" held 886 characters outside the gold spans against 70 inside, "Court" 163 against 0
and "the" 111 against 18. :func:`drop_generic` removes such spans of the CRF (the patterns'
spans are kept): a span whose text, without surrounding quotes or brackets and a leading "the" /
"a" / "an", is one word of :data:`GENERIC`.
"""

from __future__ import annotations

from collections.abc import Iterable

import regex

from tokendp.text.spans import Span

#: Words that, alone, name no one.
GENERIC = frozenset("government court tribunal state the a an and or of between moreover said".split())
_TRIM = regex.compile(r"^[“”\"‘’'()\[\]\s]*(?:(?:the|a|an)\s+)?(.*?)[“”\"‘’'()\[\]\s]*$",
                      regex.IGNORECASE | regex.DOTALL)


def is_generic(span_text: str) -> bool:
    """Whether ``span_text`` is one word of :data:`GENERIC`, without quotes, brackets and a leading article."""
    m = _TRIM.match(span_text)
    return m is not None and m.group(1).lower() in GENERIC


def drop_generic(spans: Iterable[Span], text: str) -> list[Span]:
    """``spans`` without the CRF's spans that are a generic word alone (module docstring)."""
    return [s for s in spans if s.source != "model" or not is_generic(text[s.start:s.end])]
