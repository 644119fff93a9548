"""Teacher forcing and the method adapters on a tiny model: alignment, padding, limiting cases."""

import math

import pytest
import torch

import tinylm
from tokendp.backends import HFBackend
from tokendp.eval.methods import BoundMethod, Setting, document_rows, make_settings, scrub_text
from tokendp.eval.metrics import target_logprobs
from tokendp.eval.scoring import continuation_logits
from tokendp.text.contexts import placeholder_id, prompt_template
from tokendp.text.spans import Span

OPTIONS = {"prompt_template": "<|doc|>{document}<|rewrite|>", "placeholder": "<|mask|>", "stop": []}
TEXT = "Dear Dr Helen Marsh, my patient Mr Tomas Lindqvist was admitted on 2 June 2024."
SPANS = [Span(8, 19, "PERSON"), Span(32, 50, "PERSON"), Span(67, 78, "DATETIME")]


@pytest.fixture(scope="module")
def backend():
    return HFBackend(tinylm.model(), tinylm.tokenizer(), options=OPTIONS)


@pytest.fixture(scope="module")
def rows(backend):
    tok = backend.tokenizer
    return document_rows(TEXT, SPANS, tok, template=prompt_template(tok, options=OPTIONS),
                         placeholder=placeholder_id(tok, options=OPTIONS))


def test_fixture_spans():
    assert [TEXT[s.start:s.end] for s in SPANS] == ["Helen Marsh", "Mr Tomas Lindqvist", "2 June 2024"]
    assert scrub_text(TEXT, SPANS) == "Dear Dr [PERSON], my patient [PERSON] was admitted on [DATETIME]."


def test_continuation_logits_match_a_plain_forward_pass_with_padding(backend):
    prompts = [(5, 6, 7, 8, 9, 10, 11), (12, 13)]
    cont = (20, 21, 22, 23)
    got = continuation_logits(backend, prompts, cont, batch_rows=2)  # (2, 4, V), padded together
    for r, p in enumerate(prompts):
        full = torch.tensor([[*p, *cont]])
        with torch.no_grad():
            ref = backend.model(input_ids=full).logits[0, len(p) - 1:len(p) + len(cont) - 1]  # (4, V)
        torch.testing.assert_close(got[r], ref.float(), atol=1e-4, rtol=1e-4)


def _ppl(backend, setting, rows):
    bound = BoundMethod(setting, [rows], vocab_size=backend.vocab_size, max_new_tokens=16, delta=1e-5)
    logits = continuation_logits(backend, bound.rows(rows), rows.target)  # (R, n, V)
    n = logits.shape[1]
    lp = bound.step(logits.transpose(0, 1), torch.zeros(n, dtype=torch.long)).logprobs  # (n, V)
    return math.exp(-target_logprobs(lp, torch.tensor(rows.target)).mean().item()), bound


def test_rows_of_each_method(backend, rows):
    assert len(rows.groups) == 2  # PERSON and DATETIME
    assert len(rows.public) == len(rows.original) == len(rows.groups[0])
    assert rows.original[-len(rows.target) - 1:-1] == rows.target
    fusion = BoundMethod(Setting("dp-fusion", "x", alpha=2.0, cap=0.1), [rows], vocab_size=10,
                         max_new_tokens=16, delta=1e-5)
    assert fusion.rows(rows) == [rows.public, *rows.groups]


def test_limiting_cases_of_the_mechanisms(backend, rows):
    v = backend.vocab_size
    ppl_public, _ = _ppl(backend, Setting("public", "-"), rows)
    ppl_fused, bound = _ppl(backend, Setting("dp-fusion", "tiny", alpha=2.0, cap=1e-9), rows)
    assert ppl_fused == pytest.approx(ppl_public, rel=1e-3)  # lambda ~ 0: the public distribution
    ppl_uniform, _ = _ppl(backend, Setting("dp-decoding", "lam0", lam=0.0), rows)
    assert ppl_uniform == pytest.approx(v, rel=1e-4)  # q' = 1/V everywhere
    ppl_original, _ = _ppl(backend, Setting("original", "-"), rows)
    ppl_almost, _ = _ppl(backend, Setting("dp-decoding", "lam1", lam=1 - 1e-9), rows)
    assert ppl_almost == pytest.approx(ppl_original, rel=1e-3)
    assert bound.epsilon(rows) > 0


def test_settings_are_calibrated_to_their_targets(backend, rows):
    settings = make_settings(["original", "dp-decoding", "dp-prompt", "dp-fusion"], epsilons=[10.0, 50.0],
                             paper=True, vocab_size=backend.vocab_size, max_new_tokens=16, delta=1e-5)
    names = [(s.method, s.name) for s in settings]
    assert ("dp-decoding", "lambda=0.9") in names and ("dp-fusion", "alpha*beta=0.01") in names
    for s in settings:
        eps = BoundMethod(s, [rows], vocab_size=backend.vocab_size, max_new_tokens=16, delta=1e-5).epsilon(rows)
        if s.target is not None:
            assert eps <= s.target * (1 + 1e-9) and eps == pytest.approx(s.target, rel=1e-6)
        elif s.method == "original":
            assert eps is None
        else:
            assert eps > 0


def test_the_filter_method_is_calibrated_and_spends_position_by_position(backend, rows):
    """dp-fusion-filter (issue 34): its epsilon is the filter's certificate at the target; teacher
    forcing walks the positions in order, each on what the positions before it left, so a
    budget of 0 gives the public distribution and a large one is spent (the perplexity moves
    from the public one toward the fixed accounting's at the same epsilon)."""
    from tokendp.accounting import dp_fusion_filter_budget, dp_fusion_filter_epsilon

    (setting,) = make_settings(["dp-fusion-filter"], epsilons=[8.0], paper=True, vocab_size=backend.vocab_size,
                               max_new_tokens=16, delta=1e-5)
    bound = BoundMethod(setting, [rows], vocab_size=backend.vocab_size, max_new_tokens=16, delta=1e-5)
    budget = dp_fusion_filter_budget(epsilon=8.0, alpha=setting.alpha, delta=1e-5)
    assert bound.epsilon(rows) == dp_fusion_filter_epsilon(budget=budget, alpha=setting.alpha, delta=1e-5) <= 8
    assert bound.rows(rows) == [rows.public, *rows.groups]
    ppl_public, _ = _ppl(backend, Setting("public", "-"), rows)
    ppl_empty, _ = _ppl(backend, Setting("dp-fusion-filter", "zero", alpha=2.0, target=0.0), rows)
    assert ppl_empty == pytest.approx(ppl_public, rel=1e-3)
    ppl_filter, _ = _ppl(backend, setting, rows)
    ppl_fixed, _ = _ppl(backend, Setting("dp-fusion", "eps=8", alpha=setting.alpha, target=8.0), rows)
    assert ppl_filter != ppl_public and ppl_fixed != ppl_public


@pytest.mark.parametrize("epsilon, pace", [(8.0, 0.5), (8.0, 64.0), (5.0, 4.0), (30.0, 0.05)])
def test_the_filter_teacher_forcing_in_blocks_is_the_one_position_at_a_time_walk(backend, epsilon, pace,
                                                                                  monkeypatch):
    """BoundMethod.teacher_forced under the filter steps blocks of positions on the budget left at the
    block's start and keeps each position only while its caps and fit check are the ones it would
    have had alone: its log-probabilities are those of stepping the positions one at a time with a
    fresh ledger (up to the last bits of a lam, which batched kernels round differently). The
    settings make the budgets bind at different places (never, mid-document, from the start), and
    the walk takes fewer steps than positions when the budgets do not bind. (Whether a search may
    run in float32 is decided per batch from its public rows, so a block and a lone position may
    search at different precisions, both certified: the test holds that choice at float64.)"""
    from tokendp import divergence
    from tokendp.mechanisms.dp_fusion_filter import RenyiFilter

    monkeypatch.setattr(divergence, "_float32_search", lambda *a: False)

    tok = backend.tokenizer
    text = " ".join([TEXT] * 4)
    spans = [Span(s.start + k * (len(TEXT) + 1), s.end + k * (len(TEXT) + 1), s.label) for k in range(4) for s in SPANS]
    rows = document_rows(text, spans, tok, template=prompt_template(tok, options=OPTIONS),
                         placeholder=placeholder_id(tok, options=OPTIONS))
    setting = Setting("dp-fusion-filter", "x", alpha=3.0, target=epsilon, pace=pace)
    bound = BoundMethod(setting, [rows], vocab_size=backend.vocab_size, max_new_tokens=16, delta=1e-5)
    logits = continuation_logits(backend, bound.rows(rows), rows.target).transpose(0, 1)  # (n, R, V)
    n, m = logits.shape[0], logits.shape[1] - 1
    pace_t, mask = bound.betas[:1, :m], bound.group_mask[:1, :m]
    ledger, walk, caps = RenyiFilter(bound.budgets[:1, :m].clone()), [], []
    for t in range(n):
        caps.append(bound.fusion.caps(ledger.remaining, pace_t, mask, logits.shape[-1]))
        out = bound.fusion.step(logits[t:t + 1], remaining=ledger.remaining.clone(), pace=pace_t, group_mask=mask,
                                max_lam=bound.max_lams[:1, :m])
        ledger.spend(torch.zeros(1, dtype=torch.long), out.charges)
        walk.append(out.logprobs)
    steps = []
    original = bound.fusion.step
    bound.fusion.step = lambda *a, **k: steps.append(1) or original(*a, **k)
    torch.testing.assert_close(bound.teacher_forced(logits, 0), torch.cat(walk), rtol=0, atol=1e-6)
    binding = any(bool(((c > 0) & (c < pace_t)).any()) for c in caps)
    assert binding or len(steps) < n
    assert n > 64
