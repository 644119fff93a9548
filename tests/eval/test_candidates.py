"""Candidate documents of the token-recovery game and span-safe truncation."""

import pytest
import torch

from tokendp.errors import InvalidInputError
from tokendp.eval.candidates import attack_candidates, occurrences, surface_forms, truncate_document
from tokendp.text.spans import Span

TEXT = "Mr Smith met Ms Jones on 3 May 2001. Smith, not Smithson, wrote on 3 May 2001 to Jones."
SPANS = [Span(0, 8, "PERSON"), Span(13, 21, "PERSON"), Span(25, 35, "DATETIME"),
         Span(37, 42, "PERSON"), Span(81, 86, "PERSON")]
POOL = ["Mr Adams", "Ms Brown", "Dr Chen", "Mr Diaz", "Ms Evans", "Mr Smith"]


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def test_spans_of_the_fixture():
    assert [TEXT[s.start:s.end] for s in SPANS] == ["Mr Smith", "Ms Jones", "3 May 2001", "Smith", "Jones"]
    assert surface_forms(TEXT, SPANS, "PERSON") == ["Jones", "Mr Smith", "Ms Jones", "Smith"]


def test_candidate_zero_is_the_truth_and_fakes_replace_every_occurrence():
    cands = attack_candidates(TEXT, SPANS, "DATETIME", ["1 Jan 1990", "2 Feb 1991", "3 May 2001"],
                              n_candidates=3, generator=_gen(0))
    assert cands[0] == TEXT
    for fake in cands[1:]:
        assert "3 May 2001" not in fake  # both occurrences replaced, the unannotated one too
        assert fake.count("1 Jan 1990") == 2 or fake.count("2 Feb 1991") == 2
        assert fake.replace("1 Jan 1990", "3 May 2001").replace("2 Feb 1991", "3 May 2001") == TEXT


def test_fakes_keep_other_text_and_whole_words():
    cands = attack_candidates(TEXT, SPANS, "PERSON", POOL, generator=_gen(1))
    assert len(cands) == 5
    for fake in cands[1:]:
        assert "Smithson" in fake  # not a whole-word occurrence of "Smith"
        assert " met " in fake and "3 May 2001" in fake  # other labels and text untouched
        assert "Jones" not in fake and "Mr Smith" not in fake
        assert all(name in POOL for name in ["Mr Smith"]) and fake != TEXT


def test_candidates_are_seeded():
    a = attack_candidates(TEXT, SPANS, "PERSON", POOL, generator=_gen(7))
    b = attack_candidates(TEXT, SPANS, "PERSON", POOL, generator=_gen(7))
    c = attack_candidates(TEXT, SPANS, "PERSON", POOL, generator=_gen(8))
    assert a == b and a != c


def test_distinct_forms_get_distinct_fakes_and_missing_label_raises():
    ranges = occurrences(TEXT, SPANS, "PERSON")
    assert [TEXT[a:b] for a, b in ranges] == ["Mr Smith", "Ms Jones", "Smith", "Jones"]
    with pytest.raises(InvalidInputError):
        attack_candidates(TEXT, SPANS, "CODE", POOL, generator=_gen(0))
    with pytest.raises(InvalidInputError):
        attack_candidates(TEXT, SPANS, "PERSON", POOL[:3], generator=_gen(0))


def test_truncation_is_span_safe():
    text = "First paragraph here.\nThe applicant Mr John Smith lives in Paris and works."
    spans = [Span(36, 49, "PERSON"), Span(59, 64, "LOC")]
    assert text[36:49] == "Mr John Smith"
    for limit in range(10, len(text) + 1):
        cut, kept = truncate_document(text, spans, max_chars=limit)
        assert len(cut) <= limit and text.startswith(cut)
        assert all(s.end <= len(cut) for s in kept)
        assert all(not (s.start < len(cut) < s.end) for s in spans)
    cut, kept = truncate_document(text, spans, max_chars=40)
    assert cut == "First paragraph here." and kept == []
    assert truncate_document(text, spans, max_chars=1000) == (text, sorted(spans))


def test_length_matched_fakes_take_strings_of_each_forms_length():
    pool = ["Al", "Bo", "Cy", "Dee Dee", "Eve Ann", "Flo Jo", "Mr Xavier Quentin"]
    words = lambda s: len(s.split())  # noqa: E731  (a stand-in for a token count)
    for seed in range(20):
        cands = attack_candidates(TEXT, SPANS, "PERSON", pool, generator=_gen(seed), length=words)
        for fake in cands[1:]:
            # "Mr Smith", "Ms Jones" -> two-word names; "Smith", "Jones" -> one-word names.
            assert fake.startswith(("Dee Dee met", "Eve Ann met", "Flo Jo met"))
            assert all(w not in fake for w in ("Smith ", "Jones", "Xavier"))
            one_word = fake.split(" wrote on")[0].split(", not ")[0].split(". ")[-1]
            assert one_word in ("Al", "Bo", "Cy")


def test_length_matching_falls_back_to_the_nearest_length():
    pool = ["Mr Xavier Quentin", "Dr Yara Zed Long", "Ann Lee Roe", "Bo"]
    cands = attack_candidates(TEXT, SPANS, "PERSON", pool, generator=_gen(3),
                              length=lambda s: len(s.split()))
    for fake in cands[1:]:
        assert fake.endswith("to Bo.")  # "Jones" (1 word) takes the only 1-word name
        assert "Dr Yara Zed Long" not in fake.split(" met ")[0]  # "Mr Smith" (2): a 3-word name
    a = attack_candidates(TEXT, SPANS, "PERSON", pool, generator=_gen(3), length=lambda s: len(s.split()))
    assert a == cands
