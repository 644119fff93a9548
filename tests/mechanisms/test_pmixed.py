"""PMixED: the sound per-token bound, checked exactly over every subset the sampler can draw."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from distributions import logits_batch, renyi_exact

from tokendp.accounting import (
    dp_fusion_rdp_per_token,
    pmixed_beta,
    pmixed_epsilon,
    pmixed_rdp_per_token,
    pmixed_sampled_weight,
)
from tokendp.errors import InvalidParameterError
from tokendp.mechanisms import PMixED

pytestmark = pytest.mark.usefixtures("step_path")  # every test on the CPU path and the accelerator path (tests/host_reads.py)


def _output(mech: PMixED, logits: torch.Tensor, q: float) -> torch.Tensor:
    """The exact distribution (n, V) of one step, averaged over every subset S: sum_S Pr(S) out_S."""
    n, rows, vocab = logits.shape
    members = rows - 1
    total = torch.zeros(n, vocab, dtype=torch.float64)
    for bits in itertools.product((False, True), repeat=members):
        k = sum(bits)
        weight = q**k * (1 - q) ** (members - k)
        if weight == 0:
            continue
        sampled = torch.tensor(bits).expand(n, members)
        total += weight * mech.release(logits, sampled).logprobs.exp()
    return total.log()


def _check(logits: torch.Tensor, alpha: float, beta: float, q: float) -> float:
    """max over members i and both directions of D_alpha(out || out_i) / r, out_i the neighbour
    whose member i is the public model."""
    mech = PMixED(alpha=alpha, sample_rate=q, beta=beta)
    members = logits.shape[1] - 1
    bound = pmixed_rdp_per_token(alpha=alpha, beta=beta, ensemble_size=members, sample_rate=q)
    out = _output(mech, logits, q)
    worst = 0.0
    for i in range(members):
        neighbour = logits.clone()
        neighbour[:, 1 + i] = logits[:, 0]
        out_n = _output(mech, neighbour, q)
        for d in (renyi_exact(out, out_n, alpha), renyi_exact(out_n, out, alpha)):
            worst = max(worst, (d / bound).max().item())
    return worst


@pytest.mark.parametrize("alpha", [1.5, 3.0])
def test_bound_holds_exactly_over_every_subset(alpha: float) -> None:
    """Adversarial families (tiny and zero probabilities, peaked, flat, identical), V = 2 and
    64, N = 1 to 3, q from 0.03 to 1, caps from 1e-3 to 1: exact divergences, no tolerance."""
    gen = torch.Generator().manual_seed(int(alpha * 10))
    worst = 0.0
    for members, vocab, q in ((1, 2, 1.0), (2, 2, 0.3), (3, 64, 0.03), (2, 64, 1.0), (3, 2, 0.5)):
        logits = logits_batch(8, 1 + members, vocab, gen)
        for beta in (1e-3, 0.05, 1.0):
            worst = max(worst, _check(logits, alpha, beta, q))
    assert worst <= 1.0, f"max D / r - 1 = {worst - 1}"


def test_the_published_counterexample_is_covered() -> None:
    """N = 2, alpha = 3, p0 = (3.2e-10, ...), p1 = (7.5e-8, ...), p2 = (8.2e-12, ...): both members
    within D_3 ~ 0.002 of p0. Removing member 1 (the paper's adjacency) moves the output from
    (p1 + p2)/2 to p2 alone: D_3 = 0.29, against 0.0042 claimed. With the member replaced by the
    public model (a shard without data) the certified bound holds."""
    probs = torch.tensor([[3.2e-10, 1 - 3.2e-10], [7.5e-8, 1 - 7.5e-8], [8.2e-12, 1 - 8.2e-12]], dtype=torch.float64)
    logits = probs.log().float().unsqueeze(0)  # (1, 3, 2)
    removed = renyi_exact(((probs[1] + probs[2]) / 2).log(), probs[2].log(), 3.0).item()
    assert removed == pytest.approx(0.29, abs=0.01)
    for beta in (0.0021, 0.01, 0.1):
        for q in (1.0, 0.5):
            assert _check(logits, 3.0, beta, q) <= 1.0


def test_huge_vocabulary() -> None:
    gen = torch.Generator().manual_seed(3)
    base = torch.randn(50_000, generator=gen) * 2.5
    logits = base + 0.5 * torch.randn(3, 50_000, generator=gen)
    logits[0] = base
    logits[1:, :3] += 12.0
    assert _check(logits.unsqueeze(0), 3.0, 0.05, 0.3) <= 1.0


def test_sampling_rate_and_reproducibility() -> None:
    mech = PMixED(alpha=3.0, sample_rate=0.25, beta=0.1)
    logits = torch.randn(200, 1 + 8, 20)
    a = mech.step(logits, generator=torch.Generator().manual_seed(0))
    b = mech.step(logits, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a.logprobs, b.logprobs)
    rate = a.diagnostics["sampled"].mean().item() / 8
    assert abs(rate - 0.25) < 0.03  # 1,600 Bernoulli draws: 5 standard deviations
    none = mech.release(logits, torch.zeros(200, 8, dtype=torch.bool))
    torch.testing.assert_close(none.logprobs, torch.log_softmax(logits[:, 0].double(), -1), rtol=0, atol=1e-6)


def test_accountant_closed_forms_and_calibration() -> None:
    # the weight: sum over subsets containing a member of Pr(S) / |S|, by enumeration
    n, q = 5, 0.3
    enumerated = sum(q ** (1 + k) * (1 - q) ** (n - 1 - k) * math.comb(n - 1, k) / (1 + k) for k in range(n))
    assert pmixed_sampled_weight(ensemble_size=n, sample_rate=q) == pytest.approx(enumerated, rel=1e-12)
    # q = 1 is DP-Fusion's average of N groups; N = 1, q = 1 is the cap itself
    assert pmixed_rdp_per_token(alpha=2.0, beta=0.1, ensemble_size=4, sample_rate=1.0) == pytest.approx(
        dp_fusion_rdp_per_token(alpha=2.0, beta=0.05, groups=4), rel=1e-12)
    assert pmixed_rdp_per_token(alpha=3.0, beta=0.2, ensemble_size=1, sample_rate=1.0) == pytest.approx(0.2, rel=1e-12)
    assert pmixed_rdp_per_token(alpha=3.0, beta=0.2, ensemble_size=7, sample_rate=0.0) == 0.0
    # the paper's setting: N = 80, q = 0.03, alpha = 3, T = 1024, delta = 1e-5, epsilon 8
    beta = pmixed_beta(epsilon=8.0, alpha=3.0, ensemble_size=80, sample_rate=0.03, max_tokens=1024, delta=1e-5)
    eps = pmixed_epsilon(alpha=3.0, beta=beta, ensemble_size=80, sample_rate=0.03, max_tokens=1024, delta=1e-5)
    assert eps <= 8.0 and eps == pytest.approx(8.0, rel=1e-9)
    assert 0.2 < beta < 0.25
    with pytest.raises(InvalidParameterError):
        pmixed_rdp_per_token(alpha=3.0, beta=0.1, ensemble_size=3, sample_rate=1.5)
    with pytest.raises(InvalidParameterError):
        pmixed_beta(epsilon=1.0, alpha=3.0, ensemble_size=80, sample_rate=0.03, max_tokens=1024, delta=1e-5)
    with pytest.raises(InvalidParameterError):
        PMixED(sample_rate=0.1, beta=0.1).event(shards=[])


def test_pmixed_alpha_maximises_beta_over_alpha() -> None:
    """The order choice: public parameters only, the largest beta / alpha on the grid; the paper's
    setting (N 80, q 0.03, T 1024, delta 1e-5, epsilon 8) picks its alpha = 3, and epsilon 1 (out
    of reach at alpha 3, whose conversion alone costs 4.8) gets a larger order."""
    from tokendp.accounting import PMIXED_ORDERS, pmixed_alpha

    paper = dict(ensemble_size=80, sample_rate=0.03, max_tokens=1024, delta=1e-5)
    assert pmixed_alpha(epsilon=8, **paper) == 3.0
    with pytest.raises(InvalidParameterError, match="alpha=3"):
        pmixed_beta(epsilon=1, alpha=3, **paper)
    for eps in (1.0, 3.0, 8.0):
        best = pmixed_alpha(epsilon=eps, **paper)
        ratio = pmixed_beta(epsilon=eps, alpha=best, **paper) / best
        for a in PMIXED_ORDERS:
            try:
                assert pmixed_beta(epsilon=eps, alpha=a, **paper) / a <= ratio
            except InvalidParameterError:
                pass
    assert pmixed_alpha(epsilon=1, **paper) > 3
    with pytest.raises(InvalidParameterError, match="every order"):
        pmixed_alpha(epsilon=0.01, **paper)


def test_only_sampled_members_are_searched_and_each_gets_its_own_lambda() -> None:
    """The release compacts the sampled rows before the search; each sampled member's lambda is
    the one mollify finds for that member alone, the others get 0, and the output is the average
    of the sampled mixtures, whatever the other sequences of the batch sampled."""
    from tokendp.divergence import mollify
    from tokendp.mechanisms.base import log_softmax_at
    from tokendp.mechanisms.mixture import release_allowance

    torch.manual_seed(5)
    logits = 3.0 * torch.randn(4, 7, 50)  # (n, 1+N, V)
    sampled = torch.tensor([[True, False, False, True, False, False], [False] * 6,
                            [False, False, False, False, False, True], [True] * 6])  # (n, N)
    mech = PMixED(alpha=3.0, sample_rate=0.5, beta=0.05)
    out = mech.release(logits, sampled)
    logp = log_softmax_at(logits, 1.0)  # (n, 1+N, V) float32, as the release computes them
    for i in range(4):
        k = int(sampled[i].sum())
        cap = 0.05 - k * release_allowance(3.0, groups=6, vocab=50)
        expect = torch.exp(logp[i, 0].double())
        if k:  # alone, the sequence's sampled rows are searched exactly as mollify searches them
            lam = mollify(logp[i:i + 1, 1:][:, sampled[i]], logp[i:i + 1, 0], alpha=3.0, cap=cap)[0].double()
            alone = mech.release(logits[i:i + 1], sampled[i:i + 1]).diagnostics["lam"][0]
            torch.testing.assert_close(alone[sampled[i]].double(), lam, rtol=0, atol=0)
            # in a batch, the (public) choice of a float32 search may move lambda by an ulp
            torch.testing.assert_close(out.diagnostics["lam"][i][sampled[i]].double(), lam, rtol=1e-6, atol=0)
            expect = (lam[:, None] * torch.exp(logp[i, 1:][sampled[i]].double()) + (1 - lam[:, None]) * expect).mean(0)
        assert bool((out.diagnostics["lam"][i][~sampled[i]] == 0).all())
        torch.testing.assert_close(torch.exp(out.logprobs[i]).double(), expect, rtol=1e-6, atol=1e-9)
