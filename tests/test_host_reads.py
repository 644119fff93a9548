"""The DP-Fusion step without host reads (docs/performance.md, "The step without host reads").

On the CPU, :func:`host_reads.force_accelerator_path` makes the step take the branch an
accelerator takes, and :class:`host_reads.HostReads` counts what it reads back: one read per
step (the sampled ids), and the released distributions equal those of the CPU path.
"""

from __future__ import annotations

import pytest
import torch

import tinylm
from host_reads import HostReads, force_accelerator_path
from tokendp.generation import generate, make_generator, make_generators
from tokendp.mechanisms import DPFusion, PMixED
from tokendp.sampling import sample_ids
from tokendp.errors import InvalidParameterError

V, M = 512, 5


def lm_logits(seed: int, n: int = 3, m: int = M, vocab: int = V) -> torch.Tensor:
    """(n, 1+m, V) float32 LM-like logits: private rows near the public one, some equal to it."""
    g = torch.Generator().manual_seed(seed)
    pub = torch.randn(n, 1, vocab, generator=g) * 3.0
    priv = pub + torch.randn(n, m, vocab, generator=g) * torch.rand(n, m, 1, generator=g) * 4.0
    priv[:, -1] = pub[:, 0]  # a neighbour's row: exactly the public one
    return torch.cat((pub, priv), 1)


def one_step(alpha: float, logits: torch.Tensor, betas: torch.Tensor, mask: torch.Tensor | None):
    out = DPFusion(alpha).step(logits, betas=betas, group_mask=mask)
    return out, sample_ids(out.logprobs, make_generators(0, logits.shape[0]))


CASES = [
    (2.0, None), (2.0, "ragged"), (3.5, None), (3.5, "ragged"), (5.0, None),
]


def _inputs(mask_kind, seed=0):
    logits = lm_logits(seed)
    betas = torch.tensor([[0.01, 0.03, 0.05, 0.0, 0.02]] * logits.shape[0], dtype=torch.float64)
    mask = None
    if mask_kind == "ragged":
        mask = torch.tensor([[True] * 5, [True, True, False, False, False], [False] * 5])
    return logits, betas, mask


@pytest.mark.parametrize("alpha,mask_kind", CASES)
def test_one_step_reads_the_sampled_ids_only(alpha, mask_kind, monkeypatch):
    """The accelerator path of mechanism + exact sampler reads the device once (the ids)."""
    logits, betas, mask = _inputs(mask_kind)
    force_accelerator_path(monkeypatch)
    reads = HostReads().install(monkeypatch)
    with reads:
        one_step(alpha, logits, betas, mask)
    assert dict(reads.sites) == {"sampling.py:sample_ids:tolist": 1}


@pytest.mark.parametrize("alpha,mask_kind", CASES)
def test_the_cpu_path_reads_to_stop_early(alpha, mask_kind, monkeypatch):
    """The detector sees the CPU's free reads (so the test above can fail)."""
    logits, betas, mask = _inputs(mask_kind)
    reads = HostReads().install(monkeypatch)
    with reads:
        one_step(alpha, logits, betas, mask)
    assert reads.count > 1


@pytest.mark.parametrize("alpha,mask_kind", CASES)
def test_both_paths_release_the_same_distribution(alpha, mask_kind, monkeypatch):
    """At alpha = 2 (the same math on both paths): the same lam, divergence bounds,
    log-probabilities and tokens, bit for bit. At other orders the CPU searches float32 inputs in
    float32 and certifies in float64, the accelerator searches in float64: both certified, and
    the weights agree to the search's tolerance."""
    logits, betas, mask = _inputs(mask_kind)
    cpu, cpu_ids = one_step(alpha, logits, betas, mask)
    force_accelerator_path(monkeypatch)
    acc, acc_ids = one_step(alpha, logits, betas, mask)
    caps = alpha * betas
    for out in (cpu, acc):
        assert bool((out.diagnostics["divergence"] <= caps).all())
    if alpha == 2.0:
        assert torch.equal(cpu.logprobs, acc.logprobs)
        for key in ("lam", "divergence"):
            assert torch.equal(cpu.diagnostics[key], acc.diagnostics[key])
        assert cpu_ids == acc_ids
    else:
        assert torch.allclose(cpu.diagnostics["lam"], acc.diagnostics["lam"], rtol=0, atol=1e-3)


@pytest.mark.parametrize("alpha", [1.5, 3.5, 9.0])
def test_float64_searches_agree_bit_for_bit(alpha, monkeypatch):
    """Where the CPU also searches in float64 (caps beyond the float32 margins), both paths
    release the same distribution bit for bit at every order."""
    logits, _, _ = _inputs("ragged")
    big = torch.full((logits.shape[0], M), 2.0 / (alpha - 1.0) / alpha, dtype=torch.float64)  # (alpha-1) cap = 2
    for x, betas in ((logits, big),):
        cpu, cpu_ids = one_step(alpha, x, betas, None)
        with monkeypatch.context() as patch:
            force_accelerator_path(patch)
            acc, acc_ids = one_step(alpha, x, betas, None)
        assert torch.equal(cpu.logprobs, acc.logprobs) and cpu_ids == acc_ids
        assert torch.equal(cpu.diagnostics["lam"], acc.diagnostics["lam"])


def test_pmixed_step_reads_nothing_but_its_draws(monkeypatch):
    """PMixED's step (its Poisson draws stay on the generator's device) reads nothing back."""
    logits = lm_logits(3, n=2, m=6)
    force_accelerator_path(monkeypatch)
    reads = HostReads().install(monkeypatch)
    with reads:
        PMixED(alpha=3.0, sample_rate=0.5, beta=0.1).step(logits, generator=make_generator(1))
    assert reads.count == 0, dict(reads.sites)


def test_a_bad_beta_raises_on_the_cpu_and_releases_public_on_accelerators(monkeypatch):
    """Where reads are free a bad cap raises; on accelerators it is masked to lam = 0 (sound),
    and DPFusion.event refuses it on the host before anything is charged."""
    logits, betas, _ = _inputs(None)
    betas[0, 1] = float("nan")
    with pytest.raises(InvalidParameterError):
        DPFusion(2.0).step(logits, betas=betas)
    force_accelerator_path(monkeypatch)
    out = DPFusion(2.0).step(logits, betas=betas)
    assert out.diagnostics["lam"][0, 1] == 0.0
    with pytest.raises(InvalidParameterError):
        DPFusion(2.0).event(betas={"A": 0.05, "B": float("nan")})


OPTIONS = {"placeholder": "_", "prompt": "{text}"}


@pytest.mark.parametrize("alpha", [2.0, 3.5])
def test_a_decode_step_reads_the_device_once(alpha, monkeypatch):
    """generate() over the tiny model on the accelerator path: every step (layout, mechanism,
    exact sampler, both documents at once) reads once, the append (the backend's extend) never, and the tokens equal
    the CPU path's."""
    from tokendp.backends import RowSequence
    from tokendp.generation import _Loop

    backend = tinylm.backend(OPTIONS)
    rows = [[5, 6, 7, 8, 9], [5, 6, 11, 12, 9], [5, 13, 7, 8, 9], [5, 6, 7, 8, 9]]
    sequences = [RowSequence.from_ids(rows), RowSequence.from_ids(rows[:2])]
    mech = DPFusion(alpha)
    betas = torch.tensor([[0.05, 0.1, 0.05], [0.05, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True], [True, False, False]])

    def step(logits, docs, temperature):
        return mech.step(logits, betas=betas[docs][:, :logits.shape[1] - 1],
                         group_mask=mask[docs][:, :logits.shape[1] - 1], temperature=temperature)

    def run():
        return [g.token_ids for g in generate(backend, sequences, step, max_new_tokens=6,
                                        generator=make_generators(0, 2), eos_ids=[])]

    expected = run()
    force_accelerator_path(monkeypatch)
    reads = HostReads().install(monkeypatch)
    steps, extends = [], []
    token, extend = _Loop._token, type(backend).extend

    def counted_token(loop, *args):
        reads.reset()
        with reads:
            out = token(loop, *args)
        steps.append(dict(reads.sites))
        return out

    def counted_extend(self, *args):
        reads.reset()
        with reads:
            out = extend(self, *args)
        extends.append(dict(reads.sites))
        return out

    monkeypatch.setattr(_Loop, "_token", counted_token)
    monkeypatch.setattr(type(backend), "extend", counted_extend)
    assert run() == expected
    assert len(steps) == 6 and all(s == {"sampling.py:sample_ids:tolist": 1} for s in steps), steps
    assert extends and all(e == {} for e in extends), extends


SANITIZE_OPTIONS = {"prompt_template": "<|doc|>{document}<|rewrite|>", "placeholder": "<|mask|>"}


@pytest.mark.parametrize("extras", [{}, {"epsilon": 8.0}, {"no_repeat_ngram_size": 3, "repetition_penalty": 1.2}])
def test_the_sanitize_job_reads_the_device_once_per_step(extras, monkeypatch):
    """sanitize_batch end to end on the accelerator's path (two documents with different group
    counts, the job's own step: its beta tables, its masks; with --epsilon the chosen order; with
    the public logits processors): one read per decode step, the same rewrites as on the CPU path."""
    from tokendp.generation import _Loop
    from tokendp.jobs.sanitize import sanitize_batch
    from tokendp.text.spans import Span

    backend = tinylm.backend(SANITIZE_OPTIONS)
    texts = ["Ann Lee met Bob in Paris on 3 May.", "Carl Dunn wrote to the court."]
    spans = [[Span(0, 7, "PERSON"), Span(12, 15, "PERSON"), Span(19, 24, "LOC"), Span(28, 33, "DATETIME")],
             [Span(0, 9, "PERSON")]]
    settings = {"beta": 0.05, "alpha": 2.0} if "epsilon" not in extras else {}
    kwargs = dict(spans=spans, model=backend, max_new_tokens=5, seed=0, speculative=False, **settings, **extras)
    expected = [r.text for r in sanitize_batch(texts, **kwargs)]
    force_accelerator_path(monkeypatch)
    reads = HostReads().install(monkeypatch)
    steps = []
    token = _Loop._token

    def counted_token(loop, flat, docs):
        reads.reset()
        with reads:
            out = token(loop, flat, docs)
        steps.append((tuple(docs), dict(reads.sites)))
        return out

    monkeypatch.setattr(_Loop, "_token", counted_token)
    assert [r.text for r in sanitize_batch(texts, **kwargs)] == expected
    assert len(steps) >= 5
    several_orders = "epsilon" in extras  # the two documents' own orders differ (3 groups and 1)
    for i, (docs, sites) in enumerate(steps):
        assert sites.pop("sampling.py:sample_ids:tolist") == 1, steps
        if several_orders and (i == 0 or docs != steps[i - 1][0]):  # which documents each order takes:
            assert sites and all(s.startswith("fusion.py:") for s in sites), steps  # once per set of documents
        else:
            assert sites == {}, steps
