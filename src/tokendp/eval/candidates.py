"""Documents for the evaluation: span-safe truncation and the 5-candidate token-recovery game.

The DP-Fusion paper's attack (Thareja et al., ICLR 2026, Sec. 5; data README section 3): for
an entity type L (PERSON, CODE, DATETIME) present in a document, candidate 0 is the true
document and each of candidates 1..C-1 replaces every distinct surface form of type L by a
string drawn (seeded) from the same-type list of the candidate set. Every occurrence of a
surface form is replaced: its gold spans, and any other whole-word occurrence of the same
string (an unannotated repeat would otherwise give the truth away); all other text is kept.
Optionally (``--match-lengths``) each string is drawn among those with the form's token count:
a rewrite that keeps span lengths (as DP-Fusion's public context does, one placeholder per
token) then cannot be attributed by its layout alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

import torch

from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.text.spans import Span

ATTACK_LABELS = ("PERSON", "CODE", "DATETIME")
_BREAKS = ("\n", ". ", " ")


def truncate_document(text: str, spans: Sequence[Span], *, max_chars: int) -> tuple[str, list[Span]]:
    """Cut ``text`` to at most ``max_chars`` characters without splitting a span.

    The cut falls at the last paragraph break, else sentence end, else space, in the second
    half of the window and outside every span (else at the last position outside every span);
    trailing whitespace is dropped and only spans wholly before the cut are kept.
    """
    if max_chars < 1:
        raise InvalidParameterError(f"max_chars must be >= 1, got {max_chars!r}")
    spans = sorted(spans)
    if len(text) <= max_chars:
        return text, list(spans)
    inside = [False] * (max_chars + 1)  # inside[c]: a cut at c would split a span
    for s in spans:
        for c in range(max(s.start + 1, 0), min(s.end, max_chars + 1)):
            inside[c] = True
    cut = _break_point(text, inside, max_chars)
    cut = len(text[:cut].rstrip()) or cut
    return text[:cut], [s for s in spans if s.end <= cut]


def _break_point(text: str, inside: list[bool], max_chars: int) -> int:
    for sep in _BREAKS:
        c = max_chars
        while c > max_chars // 2:
            c = text.rfind(sep, max_chars // 2, c)
            if c < 0:
                break
            end = c + len(sep)
            if end <= max_chars and not inside[end]:
                return end
        # no break of this kind in the window: try the next kind
    safe = [c for c in range(max_chars, 0, -1) if not inside[c]]
    if not safe:
        raise InvalidInputError("no cut point outside the spans: raise max_chars")
    return safe[0]


def surface_forms(text: str, spans: Sequence[Span], label: str) -> list[str]:
    """The distinct strings of ``label``'s spans, sorted."""
    return sorted({text[s.start:s.end] for s in spans if s.label == label})


def occurrences(text: str, spans: Sequence[Span], label: str) -> list[tuple[int, int]]:
    """Non-overlapping character ranges to replace for ``label``, in order.

    The label's gold spans (longest first when they nest), then every whole-word occurrence of
    one of its surface forms that overlaps none of those (longest forms first).
    """
    taken: list[tuple[int, int]] = []

    def free(a: int, b: int) -> bool:
        return all(b <= s or e <= a for s, e in taken)

    for s in sorted((s for s in spans if s.label == label), key=lambda s: (s.start - s.end, s.start)):
        if free(s.start, s.end):
            taken.append((s.start, s.end))
    for form in sorted(surface_forms(text, spans, label), key=len, reverse=True):
        for m in re.finditer(rf"(?<!\w){re.escape(form)}(?!\w)", text):
            if free(m.start(), m.end()):
                taken.append((m.start(), m.end()))
    return sorted(taken)


def replace_forms(text: str, ranges: Sequence[tuple[int, int]], mapping: Mapping[str, str]) -> str:
    """``text`` with each range's string replaced by ``mapping[string]``."""
    out, last = [], 0
    for a, b in ranges:
        out += [text[last:a], mapping[text[a:b]]]
        last = b
    return "".join(out) + text[last:]


def attack_candidates(text: str, spans: Sequence[Span], label: str, pool: Sequence[str], *,
                      n_candidates: int = 5, generator: torch.Generator,
                      length: Callable[[str], int] | None = None) -> list[str]:
    """``n_candidates`` documents for ``label``: index 0 is ``text``, the others are fakes.

    In each fake, the k distinct surface forms of ``label`` get k distinct strings drawn
    uniformly (``generator``) from ``pool`` minus the true forms, so every fake differs from
    the truth. With ``length`` (e.g. a token count), each form's string is drawn among those of
    the form's length, or the nearest length when there is none: the fakes then differ from
    the truth in content, not in layout. Raises when the document has no span of ``label``.
    """
    forms = surface_forms(text, spans, label)
    if not forms:
        raise InvalidInputError(f"the document has no {label} span to attack")
    if n_candidates < 2:
        raise InvalidParameterError(f"n_candidates must be >= 2, got {n_candidates!r}")
    choices = sorted(set(pool) - set(forms))
    if len(choices) < len(forms):
        raise InvalidInputError(
            f"the {label} candidate list has {len(choices)} usable strings for {len(forms)} surface forms; "
            "use a larger candidate set")
    ranges = occurrences(text, spans, label)
    sizes = None if length is None else {s: length(s) for s in [*forms, *choices]}
    out = [text]
    for _ in range(n_candidates - 1):
        if sizes is None:
            draw = torch.randperm(len(choices), generator=generator)[:len(forms)].tolist()
            mapping = {f: choices[i] for f, i in zip(forms, draw)}
        else:
            mapping = _length_matched(forms, choices, sizes, generator)
        out.append(replace_forms(text, ranges, mapping))
    return out


def _length_matched(forms: list[str], choices: list[str], sizes: Mapping[str, int],
                    generator: torch.Generator) -> dict[str, str]:
    """A distinct string of ``choices`` per form, uniform among the unused ones nearest in length."""
    mapping: dict[str, str] = {}
    for form in forms:
        free = [c for c in choices if c not in mapping.values()]
        gap = {c: abs(sizes[c] - sizes[form]) for c in free}
        nearest = [c for c in free if gap[c] == min(gap.values())]
        mapping[form] = nearest[int(torch.randint(len(nearest), (1,), generator=generator))]
    return mapping
