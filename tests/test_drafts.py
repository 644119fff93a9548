"""Prompt-lookup drafts: the longest n-gram, the occurrence nearest the cursor, the released
tokens as a fallback, exclusions, room."""

from __future__ import annotations

import pytest

from tokendp.drafts import PromptLookup
from tokendp.errors import InvalidParameterError

PUBLIC = [9, 1, 2, 3, 4, 5, 1, 2, 7, 8, 0, 6, 1, 2, 3, 4]


def test_longest_ngram_wins_and_its_continuation_is_proposed():
    drafts = PromptLookup(max_tokens=3, ngram=3).for_document(PUBLIC)
    assert drafts.propose([5, 1, 2], room=10) == [7, 8, 0]  # the trigram 5 1 2 occurs once
    assert drafts.propose([42], room=10) == []  # nothing to continue


def test_without_a_public_match_nothing_is_guessed():
    drafts = PromptLookup(max_tokens=3).for_document(PUBLIC)
    # "30 31" recurs in the released tokens (a made-up filler), but guesses come from the public row only
    assert drafts.propose([30, 31, 32, 40, 30, 31, 33, 30, 31], room=10) == []


def test_among_occurrences_the_one_nearest_the_cursor_wins():
    lookup = PromptLookup(max_tokens=2, ngram=2)
    drafts = lookup.for_document(PUBLIC)
    assert drafts.propose([9, 1, 2, 3], room=10) == [4, 5]  # the cursor follows the match at 1
    assert drafts.propose([9, 1, 2, 3, 4, 5, 1, 2], room=10) == [7, 8]  # moved on by 4: "1 2" at 6, not 12
    fresh = lookup.for_document(PUBLIC)
    fresh.cursor, fresh.seen = 13, 2
    assert fresh.propose([1, 2], room=10) == [3, 4]  # "1 2" at 12 is nearest the cursor


def test_drafts_stop_before_excluded_tokens_at_the_room_and_the_row_end():
    drafts = PromptLookup(max_tokens=4, exclude=frozenset({0})).for_document(PUBLIC)
    assert drafts.propose([2, 7], room=10) == [8]  # the placeholder 0 ends the draft
    assert PromptLookup(max_tokens=4).for_document(PUBLIC).propose([5, 1], room=2) == [2, 7]
    assert PromptLookup(max_tokens=4).for_document(PUBLIC).propose([5, 1], room=0) == []
    assert PromptLookup(max_tokens=4).for_document(PUBLIC).propose([2, 3], room=10) == [4, 5, 1, 2]
    assert PromptLookup(max_tokens=4).for_document(PUBLIC).propose([3, 4], room=10) == [5, 1, 2, 7]


@pytest.mark.parametrize("kwargs", [dict(max_tokens=0), dict(ngram=0), dict(max_tokens=2.5)])
def test_parameters_are_checked(kwargs):
    with pytest.raises(InvalidParameterError):
        PromptLookup(**kwargs)


def test_guesses_pause_after_two_misses_and_resume_after_a_right_one():
    """Every guess, sent or not, is checked against the next released token."""
    drafts = PromptLookup(max_tokens=2).for_document(PUBLIC)
    assert drafts.propose([3], room=10) == [4, 5]
    assert drafts.propose([3, 9], room=10) == [1, 2]  # one miss: score 1/2, still sent
    assert drafts.propose([3, 9, 7], room=10) == []  # two: 1/4, the guess [8, 0] is kept back
    assert drafts.propose([3, 9, 7, 8], room=10) == [0, 6]  # the held-back guess was right: 5/8
