"""Speculative decoding: the output has exactly the one-token engine's distribution, the KV cache
forgets rejected guesses, and charging, streaming and stopping behave as without drafts."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import tinylm
from tokendp import generation
from tokendp.backends import HFBackend, RowSequence
from tokendp.drafts import PromptLookup
from tokendp.errors import BudgetExceededError
from tokendp.generation import generate, make_generator
from tokendp.mechanisms import DPFusion, MechanismStep

V, T = 5, 3  # a vocabulary small enough to enumerate every output of T tokens
PUBLIC = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]
PRIVATE = [1, 2, 0, 4, 1, 2, 0, 4, 1, 2]  # the "span" tokens 3 -> 0
SEQ = RowSequence.from_ids([PUBLIC, PRIVATE])
LOOKUP = PromptLookup(max_tokens=2, ngram=2)


@pytest.fixture(scope="module")
def small():
    return HFBackend(tinylm.model(vocab=V), tinylm.tokenizer())


@pytest.fixture(scope="module")
def reference(small):
    return reference_joint(small.model)


@pytest.fixture(scope="module")
def backend():
    return HFBackend(tinylm.model(), tinylm.tokenizer())


def dp_fusion_step(logits, docs, temperature):
    """DP-Fusion with one group at a cap that binds (the mixture is neither row)."""
    return DPFusion(alpha=2.0).step(logits, betas=torch.full((len(docs), 1), 0.05), temperature=temperature)


def reference_joint(model) -> dict[tuple[int, ...], float]:
    """P(y_1 .. y_T) of one-token DP-Fusion, every prefix recomputed from scratch (no cache; one
    batch of equal-length rows per prefix length)."""
    step = {(): 0.0}  # log-probability of each prefix
    for t in range(T):
        prefixes = list(itertools.product(range(V), repeat=t))
        rows = torch.tensor([row + list(p) for p in prefixes for row in (PUBLIC, PRIVATE)])  # (2 P, L)
        with torch.inference_mode():
            logits = model(input_ids=rows).logits[:, -1].float().view(len(prefixes), 2, V)  # (P, 2, V)
        logprobs = dp_fusion_step(logits, torch.arange(len(prefixes)), 1.0).logprobs  # (P, V)
        step = {(*p, y): step[p] + float(logprobs[i, y]) for i, p in enumerate(prefixes) for y in range(V)}
    return {path: math.exp(lp) for path, lp in step.items()}


def engine_joint(backend, monkeypatch, drafter) -> dict[tuple[int, ...], float]:
    """P(y) as the engine computes it, for every y at once: one document per output y, and a
    sampler that releases y's tokens and multiplies the probabilities it is given for them.
    Drafts are accepted or rejected per document, so the batch rolls back different tails."""
    paths = list(itertools.product(range(V), repeat=T))
    prob = [1.0] * len(paths)
    calls = []

    def step(logits, docs, temperature):
        calls.append(docs.tolist())
        return dp_fusion_step(logits, docs, temperature)

    def forced(logprobs, generator, greedy=False):
        out = []
        for row, doc in enumerate(calls[-1]):
            y = paths[doc][len(released[doc])]
            prob[doc] *= math.exp(float(logprobs[row, y]))
            out.append(y)
        return out

    released = [[] for _ in paths]
    monkeypatch.setattr(generation, "sample_ids", forced)
    generate(backend, [SEQ] * len(paths), step, max_new_tokens=T, generator=make_generator(0), eos_ids=[],
             drafter=drafter, on_token=lambda doc, tok: released[doc].append(tok))
    assert [tuple(r) for r in released] == paths
    return dict(zip(paths, prob))


def test_every_output_has_the_one_token_engines_probability(small, reference, monkeypatch):
    """Enumeration over all V^T outputs: the speculative engine's joint distribution of the
    first T tokens equals the one-token engine's and the recomputed one (float32 logits)."""
    assert sum(reference.values()) == pytest.approx(1.0, abs=1e-9)
    sequential = engine_joint(small, monkeypatch, None)
    speculative = engine_joint(small, monkeypatch, LOOKUP)
    for path, p in reference.items():
        assert sequential[path] == pytest.approx(p, rel=1e-4, abs=1e-9)
        assert speculative[path] == pytest.approx(p, rel=1e-4, abs=1e-9)


def test_draws_follow_the_one_token_distribution(small, reference):
    """Chi-square of 4,000 speculative draws (one batch) against the enumerated joint distribution."""
    scipy_stats = pytest.importorskip("scipy.stats")
    n = 4000
    out = generate(small, [SEQ] * n, dp_fusion_step, max_new_tokens=T, generator=make_generator(11),
                   eos_ids=[], drafter=LOOKUP)
    counts = {path: 0 for path in reference}
    for r in out:
        counts[r.token_ids] += 1
    expected = {path: p * n for path, p in reference.items()}
    big = [path for path in reference if expected[path] >= 5]
    small_cells = [path for path in reference if expected[path] < 5]  # pooled into one cell
    observed = [counts[p] for p in big] + [sum(counts[p] for p in small_cells)]
    wanted = [expected[p] for p in big] + [sum(expected[p] for p in small_cells)]
    scale = sum(observed) / sum(wanted)  # the enumerated probabilities sum to 1 within float32
    assert scipy_stats.chisquare(observed, [w * scale for w in wanted]).pvalue > 1e-4


def public_step(logits, docs, temperature):
    """The public row's distribution."""
    return MechanismStep(torch.log_softmax(logits[:, 0].float() / temperature, -1), {})


SEQS = [RowSequence.from_ids([[5, 6, 7, 8], [5, 6, 9, 8]], public_prefix=2),
        RowSequence.from_ids([[10, 11, 12, 13, 14, 15]]),
        RowSequence.from_ids([[20, 21], [22, 21], [23, 21]])]


class Oracle:
    """Drafts of 3 tokens from a known answer per document, wrong wherever the answer's index
    is 3 mod ``period`` (document n: period 4 + n), so guesses are accepted for runs of every
    length and rejected at different positions in different documents of a batch."""

    def __init__(self, answers):
        self.answers, self.started = answers, 0

    def for_document(self, public):
        doc, self.started = self.started, self.started + 1
        answer, period = self.answers[doc], 4 + doc

        class Drafts:
            def propose(self, released, room):
                at = len(released)
                return [t + 1 if (at + i) % period == 3 else t for i, t in enumerate(answer[at:at + min(3, room)])]

        return Drafts()


def _counting(backend):
    passes = []
    inner = backend.extend
    backend.extend = lambda state, tokens: passes.append(tokens.shape[1]) or inner(state, tokens)
    return passes


def test_same_tokens_as_the_one_token_engine_greedy_and_seeded(backend):
    """Greedy: the same tokens as a full recomputation (so the cache after every rollback reads
    right); sampled with a seed, one document at a time: the same tokens too (the same draws in
    the same order); a batch: the same tokens for the same seed."""
    from test_generation import _greedy_reference

    answers = [_greedy_reference(backend.model, s.rows[0].ids, 20) for s in SEQS]
    passes = _counting(backend)
    try:
        spec = generate(backend, SEQS, public_step, max_new_tokens=20, temperature=0,
                        generator=make_generator(0), eos_ids=[], drafter=Oracle(answers))
        assert [list(r.token_ids) for r in spec] == answers
        assert len(passes) < 10 and max(passes) == 4  # drafts of 3, runs accepted
        for n, seq in enumerate(SEQS):
            one = generate(backend, [seq], public_step, max_new_tokens=20, generator=make_generator(5), eos_ids=[])
            two = generate(backend, [seq], public_step, max_new_tokens=20, generator=make_generator(5), eos_ids=[],
                           drafter=Oracle([list(one[0].token_ids)]))
            assert one[0].token_ids == two[0].token_ids
        runs = [generate(backend, SEQS, public_step, max_new_tokens=20, generator=make_generator(9), eos_ids=[],
                         drafter=Oracle(answers)) for _ in range(2)]
        assert [r.token_ids for r in runs[0]] == [r.token_ids for r in runs[1]]  # a seed reproduces a batch
    finally:
        del backend.extend


def test_charge_precedes_each_released_token(backend):
    """One charge per released token of each document, before it is sampled; a refused charge
    releases nothing more."""
    answers = [_greedy(backend, s, 20) for s in SEQS]
    events = []

    def charge(docs):
        events.append(("charge", tuple(docs)))
        if sum(e[0] == "charge" for e in events) == 12:
            raise BudgetExceededError("budget")

    def on_token(doc, tok):
        events.append(("token", doc))

    with pytest.raises(BudgetExceededError):
        generate(backend, SEQS, public_step, max_new_tokens=20, temperature=0, generator=make_generator(0),
                 eos_ids=[], charge=charge, on_token=on_token, drafter=Oracle(answers))
    charges = [i for i, e in enumerate(events) if e[0] == "charge"]
    assert charges[-1] == len(events) - 1  # nothing after the refused charge
    for i, j in zip(charges, charges[1:]):
        assert events[i + 1:j] == [("token", d) for d in events[i][1]]
    assert sum(e[0] == "token" for e in events) > 11  # some charges covered tokens of a verified draft


def _greedy(backend, seq, steps):
    return list(generate(backend, [seq], public_step, max_new_tokens=steps, temperature=0,
                         generator=make_generator(0), eos_ids=[])[0].token_ids)


def test_limits_eos_and_stop_strings_as_without_drafts(backend):
    answers = [_greedy(backend, s, 12) for s in SEQS]
    eos = answers[0][5]
    stop = backend.tokenizer.decode(answers[1][6:8])
    kwargs = dict(max_new_tokens=[7, 12, 3], temperature=0, generator=make_generator(0), eos_ids=[eos],
                  stop_strings=[stop])
    one = generate(backend, SEQS, public_step, **kwargs)
    spec = generate(backend, SEQS, public_step, **kwargs, drafter=Oracle(answers))
    assert [(r.token_ids, r.text, r.stop_reason) for r in spec] == [(r.token_ids, r.text, r.stop_reason) for r in one]
    assert one[0].stop_reason == "eos" and one[1].stop_reason == "stop_string" and len(one[2].token_ids) == 3


def test_public_logits_processors_see_the_released_prefix_at_every_position(backend):
    """No repeated tokens: at a verified position the processor must count the tokens released
    earlier in the same round."""
    from tokendp.logits_processors import PublicLogitsProcessor

    kwargs = dict(max_new_tokens=12, temperature=0, generator=make_generator(0), eos_ids=[],
                  logits_processor=PublicLogitsProcessor(no_repeat_ngram_size=1))
    one = generate(backend, SEQS, public_step, **kwargs)
    spec = generate(backend, SEQS, public_step, **kwargs, drafter=Oracle([list(r.token_ids) for r in one]))
    assert [r.token_ids for r in spec] == [r.token_ids for r in one]
    assert all(len(set(r.token_ids)) == 12 for r in spec)


def test_a_model_that_cannot_roll_back_decodes_one_token_at_a_time():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, use_sliding_window=True, sliding_window=4, max_window_layers=0)
    sliding = HFBackend(Qwen2ForCausalLM(cfg), tinylm.tokenizer())
    assert not sliding.can_roll_back
    kwargs = dict(max_new_tokens=6, temperature=0, generator=make_generator(0), eos_ids=[])
    assert generate(sliding, [SEQ], public_step, **kwargs, drafter=LOOKUP)[0].token_ids == \
        generate(sliding, [SEQ], public_step, **kwargs)[0].token_ids
