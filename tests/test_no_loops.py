"""Issue 45 item 5: the default rewriter, at sanitize's default decoding, does not loop on a
Windows letter with non-Latin names (docs/sanitize.md, "Loops"): ``benchmarks/held_out.py``'s
``issue_letter``.

Its spans are those the ``auto`` tagger found, its mistake included (``Thank`` as a PERSON, so
the public row reads "Name you for referring Name"): from there the rewrite wrote salutation
after salutation. Without the no-repeat rule, seed 3 listed "Mrs Colquhoun,\n\nMrs Fanshawe,..."
to T (0.28 of its word 8-grams repeated at T = 200, 0.59 at T = 303); with it, the same draws
leave the list after a few more names and the letter goes on. beta and alpha are given, as
epsilon 8 at T = 303 calibrates them, so that a smaller T only shortens the same rewrite: the
test runs 200 tokens, not 303.
"""

from __future__ import annotations

import pytest
import torch
from repo_scripts import load_script

pytestmark = pytest.mark.slow

BETA, ALPHA = 0.018691863817483573, 3.5  # epsilon 8 per group at T = 303 (tokendp.dp_fusion_beta)


@pytest.fixture(scope="module")
def rewriter():
    from tokendp.backends.hf import load_named_model

    torch.set_num_threads(1)
    return load_named_model("rewriter", device="cpu")


def test_the_calibration_is_epsilon_8_at_t_303():
    from tokendp.accounting import dp_fusion_epsilon

    assert dp_fusion_epsilon(alpha=ALPHA, beta=BETA, groups=5, max_tokens=303, delta=1e-5) == pytest.approx(8.0)


def test_a_crlf_letter_with_non_latin_names_does_not_loop_at_the_defaults(rewriter):
    from tokendp import sanitize

    letter = load_script("benchmarks/held_out.py").issue_letter()
    repeated_8grams = load_script("benchmarks/loops.py").repeated_ngrams
    assert "\r\n" in letter.text and "Žáková" in letter.text
    res = sanitize(letter.text, spans=list(letter.spans), model=rewriter, beta=BETA, alpha=ALPHA, max_new_tokens=200,
                   seed=3)
    assert res.report.decoding["no_repeat_ngram_size"] == 16
    # before: "Mrs Colquhoun,\n\nMrs Fanshawe,\n\n..." to T, 0.28 of its word 8-grams repeated; now 0.05
    assert repeated_8grams(res.text, 8) < 0.1, res.text
    assert "On examination there was" in res.text  # the letter goes on after the list
