"""The decoding loop: stopping, seeds, check-then-commit charging, streaming, batching."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import tinylm
from tokendp.backends import HFBackend, RowSequence
from tokendp.errors import BudgetExceededError, InvalidParameterError
from tokendp.generation import generate, make_generator, sample


@pytest.fixture(scope="module")
def backend():
    return HFBackend(tinylm.model(), tinylm.tokenizer())


def public_step(logits, docs, temperature):
    """The public row's distribution (row 0), with a diagnostic per document."""
    logp = torch.log_softmax(logits[:, 0].float() / temperature, -1)  # (Na, V)
    return SimpleNamespace(logprobs=logp, diagnostics={"rows": torch.full((len(docs), 1), logits.shape[1] * 1.0)})


SEQS = [RowSequence.from_ids([[5, 6, 7, 8], [5, 6, 9, 8]], public_prefix=2),
        RowSequence.from_ids([[10, 11, 12, 13, 14, 15]]),
        RowSequence.from_ids([[20, 21], [22, 21], [23, 21]])]


def _greedy_reference(model, ids, steps):
    ids = list(ids)
    out = []
    for _ in range(steps):
        with torch.inference_mode():
            nxt = int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
        ids.append(nxt)
        out.append(nxt)
    return out


def test_greedy_cached_batched_decoding_equals_full_recomputation(backend):
    res = generate(backend, SEQS, public_step, max_new_tokens=6, temperature=0,
                   generator=make_generator(0), eos_ids=[])
    for seq, r in zip(SEQS, res):
        assert list(r.token_ids) == _greedy_reference(backend.model, seq.rows[0].ids, 6)
        assert r.stop_reason == "max_new_tokens"
        assert r.text == backend.tokenizer.decode(r.token_ids)
    assert res[2].diagnostics["rows"].tolist() == [3.0]  # padded layout: R = 3 for all


def test_seeds_reproduce_and_batching_is_vectorised(backend):
    a = generate(backend, SEQS, public_step, max_new_tokens=8, generator=make_generator(7), eos_ids=[])
    b = generate(backend, SEQS, public_step, max_new_tokens=8, generator=make_generator(7), eos_ids=[])
    assert [r.token_ids for r in a] == [r.token_ids for r in b]
    assert all(len(r.token_ids) == 8 for r in a)
    c = generate(backend, SEQS, public_step, max_new_tokens=8, generator=make_generator(None), eos_ids=[])
    assert all(len(r.token_ids) == 8 for r in c)


def test_eos_and_stop_strings_end_a_document_early(backend):
    first = generate(backend, SEQS, public_step, max_new_tokens=6, temperature=0,
                     generator=make_generator(0), eos_ids=[])
    eos = first[0].token_ids[2]
    res = generate(backend, SEQS, public_step, max_new_tokens=6, temperature=0,
                   generator=make_generator(0), eos_ids=[eos])
    cut = first[0].token_ids.index(eos)
    assert res[0].stop_reason == "eos" and res[0].token_ids == first[0].token_ids[:cut]
    assert res[1].token_ids == first[1].token_ids[:len(res[1].token_ids)]
    tok = backend.tokenizer
    stop = tok.decode(first[1].token_ids[3:5])
    res = generate(backend, SEQS, public_step, max_new_tokens=6, temperature=0,
                   generator=make_generator(0), eos_ids=[], stop_strings=[stop])
    assert res[1].stop_reason == "stop_string" and stop not in res[1].text
    assert tok.decode(first[1].token_ids).startswith(res[1].text)


def test_ledger_is_charged_before_sampling_and_streaming(backend):
    events = []
    def charge(docs):
        events.append(("charge", tuple(docs)))
        if len([e for e in events if e[0] == "charge"]) == 3:
            raise BudgetExceededError("budget")
    def on_token(doc, tok):
        events.append(("token", doc))
    with pytest.raises(BudgetExceededError):
        generate(backend, SEQS, public_step, max_new_tokens=5, generator=make_generator(0),
                 eos_ids=[], charge=charge, on_token=on_token)
    # two full steps released, the third refused before any of its tokens was sampled
    assert [e[0] for e in events] == ["charge"] + ["token"] * 3 + ["charge"] + ["token"] * 3 + ["charge"]


def test_parameter_validation(backend):
    with pytest.raises(InvalidParameterError, match="max_new_tokens"):
        generate(backend, SEQS, public_step, max_new_tokens=0, generator=make_generator(0))
    with pytest.raises(InvalidParameterError, match="temperature"):
        generate(backend, SEQS, public_step, max_new_tokens=2, temperature=-1, generator=make_generator(0))


def test_per_document_limits(backend):
    res = generate(backend, SEQS, public_step, max_new_tokens=[2, 5, 3], generator=make_generator(0), eos_ids=[])
    assert [len(r.token_ids) for r in res] == [2, 5, 3]
    assert all(r.stop_reason == "max_new_tokens" for r in res)
    with pytest.raises(InvalidParameterError, match="one per sequence"):
        generate(backend, SEQS, public_step, max_new_tokens=[2, 5], generator=make_generator(0))


def test_sample_draws_from_the_distribution_and_never_a_zero():
    """Chi-square on 200,000 draws over 6 tokens (one of them impossible, one rare)."""
    scipy_stats = pytest.importorskip("scipy.stats")
    probs = torch.tensor([0.5, 0.25, 0.0, 0.15, 0.0999, 0.0001])
    logprobs = probs.log().expand(200_000, 6)  # (N, V)
    draws = sample(logprobs, make_generator(3))  # (N,)
    counts = torch.bincount(draws, minlength=6).double()
    assert counts[2] == 0
    expected = probs.double() * len(draws)
    keep = expected > 0
    p_value = scipy_stats.chisquare(counts[keep].numpy(), expected[keep].numpy()).pvalue
    assert p_value > 1e-4, p_value
    assert torch.equal(sample(logprobs[:5], make_generator(3)), sample(logprobs[:5], make_generator(3)))


def test_rows_equal_to_the_public_row_get_its_logits_exactly(backend):
    """A neighbour's group row IS the public row: the mechanism must see identical logits for
    it, whatever rounding the batched forward pass gives rows at other positions."""
    seqs = [RowSequence.from_ids([[5, 6, 7], [5, 9, 7], [5, 6, 7]], public_prefix=1),  # row 2 twins the public row
            RowSequence.from_ids([[1, 2], [1, 2], [3, 2], [1, 2]])]
    seen = []

    def step(logits, docs, temperature):
        seen.append(logits.clone())
        return public_step(logits, docs, temperature)

    generate(backend, seqs, step, max_new_tokens=3, generator=make_generator(0), eos_ids=[])
    for logits in seen:  # (N, R, V)
        assert torch.equal(logits[0, 2], logits[0, 0]) and not torch.equal(logits[0, 1], logits[0, 0])
        assert torch.equal(logits[1, 1], logits[1, 0]) and torch.equal(logits[1, 3], logits[1, 0])


def test_diagnostics_of_documents_with_fewer_rows_outlive_the_widest(backend):
    """Per-row diagnostics narrow when the widest document finishes; the rest keep accumulating."""
    def step(logits, docs, temperature):
        return SimpleNamespace(logprobs=torch.log_softmax(logits[:, 0].double(), -1),
                               diagnostics={"lam": torch.ones(len(docs), logits.shape[1] - 1)})

    seqs = [RowSequence.from_ids([[5, 6], [5, 7], [5, 8], [5, 9]], public_prefix=1), RowSequence.from_ids([[1, 2], [1, 3]])]
    out = generate(backend, seqs, step, max_new_tokens=[1, 3], generator=make_generator(0), eos_ids=[])
    assert out[0].diagnostics["lam"].tolist() == [1.0, 1.0, 1.0]
    assert out[1].diagnostics["lam"].tolist() == pytest.approx([1.0, 1 / 3, 1 / 3])  # padding slots: step 1 only


def test_public_logits_processor_sees_only_released_tokens_and_treats_rows_alike(backend):
    """No-repeat unigrams: no released token repeats; every row of a document is adjusted alike
    (a twin of the public row stays its twin), from the released tokens only."""
    from tokendp.logits_processors import PublicLogitsProcessor

    seqs = [RowSequence.from_ids([[5, 6, 7], [5, 9, 7], [5, 6, 7]], public_prefix=1), RowSequence.from_ids([[1, 2], [3, 2]])]
    seen = []

    def step(logits, docs, temperature):
        seen.append(logits.clone())
        return public_step(logits, docs, temperature)

    out = generate(backend, seqs, step, max_new_tokens=6, temperature=0, generator=make_generator(0), eos_ids=[],
                   logits_processor=PublicLogitsProcessor(no_repeat_ngram_size=1))
    for r in out:
        assert len(set(r.token_ids)) == len(r.token_ids) == 6
    for t, logits in enumerate(seen):
        assert torch.equal(logits[0, 2], logits[0, 0])
        for doc, r in enumerate(out):
            banned = list(r.token_ids[:t])
            assert torch.isinf(logits[doc, :2][:, banned]).all()  # the public and the private row alike


def scripted_step(script):
    """A step that releases ``script[t]`` at step t for every document, whatever the logits."""
    def step(logits, docs, temperature):
        logp = torch.full((len(docs), logits.shape[-1]), float("-inf"))
        logp[:, script[step.calls]] = 0.0
        step.calls += 1
        return SimpleNamespace(logprobs=logp, diagnostics={})
    step.calls = 0
    return step


@pytest.mark.parametrize("text, start", [("a\nb\na\n", 4), ("a\nb\na", None), ("Mrs Cole,\n\nMrs Cole,\n\n", 11),
                                         ("x\n  a  \n\nq\na\n\n\n", 11), ("a\na b\n", None), ("\n\n\n", None),
                                         ("Hi\nHi\n", 3), ("one\n\ntwo\n\n", None)])
def test_repeated_line_finds_the_last_complete_line_when_it_repeats(text, start):
    from tokendp.generation import repeated_line

    assert repeated_line(text) == start


def test_a_repeated_line_ends_the_document_before_it_only_when_asked(backend):
    tok = backend.tokenizer
    script = tok("Dear Ann,\n\nMrs Cole,\n\nMrs Cole,\n\nthe end", add_special_tokens=False)["input_ids"]
    seqs = [RowSequence.from_ids([[5, 6, 7]])]
    off = generate(backend, seqs, scripted_step(script), max_new_tokens=len(script), generator=make_generator(0),
                   eos_ids=[])
    assert off[0].stop_reason == "max_new_tokens" and off[0].text.count("Mrs Cole") == 2
    on = generate(backend, seqs, scripted_step(script), max_new_tokens=len(script), generator=make_generator(0),
                  eos_ids=[], stop_at_repeated_line=True)
    assert on[0].stop_reason == "repeated_line" and on[0].text == "Dear Ann,\n\nMrs Cole,"
    # it stops on the token that closes the repeated line: the released tokens are a prefix
    assert tok.decode(on[0].token_ids) == "Dear Ann,\n\nMrs Cole,\n\nMrs Cole,\n"
