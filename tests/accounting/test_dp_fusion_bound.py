"""Property test: the DP-Fusion per-token RDP bound r_i is never exceeded (numpy float64 only).

For random and adversarial distributions we build each group's mixture
q_i = lam_i p_i + (1 - lam_i) p_pub with lam_i the largest value (float64 bisection on the exact
divergence) whose symmetric divergence max(D_a(q_i||p_pub), D_a(p_pub||q_i)) is <= c_i, average
the m groups into p_out, replace group i by p_pub to get the neighbour p_out', and check that
D_a(p_out||p_out') and D_a(p_out'||p_out) stay <= r_i = log(1 + (e^{(a-1)c_i} - 1)/m)/(a-1).
At m = 1 the bound is attained whenever the cap binds.
"""

from __future__ import annotations

import numpy as np

from tokendp.accounting import dp_fusion_rdp_per_token

KINDS = ("dirichlet", "peaked", "tiny_public", "zero_public", "identical", "onehot")
TOLERANCE = 1e-9


def _logsumexp(x: np.ndarray) -> np.ndarray:
    top = np.max(x, axis=-1, keepdims=True)
    shift = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore", over="ignore"):
        out = np.log(np.sum(np.exp(x - shift), axis=-1)) + shift[..., 0]
    return np.where(np.isposinf(top[..., 0]), np.inf, out)


def _log(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(p)


def _renyi(logp: np.ndarray, logq: np.ndarray, alpha: float) -> np.ndarray:
    """D_alpha(P||Q) over the last axis from float64 logs (+inf when P is not inside Q's support)."""
    with np.errstate(invalid="ignore"):
        terms = alpha * logp + (1.0 - alpha) * logq
    terms = np.where(np.isneginf(logp), -np.inf, terms)
    return _logsumexp(terms) / (alpha - 1.0)


def _symmetric(logp: np.ndarray, logq: np.ndarray, alpha: float) -> np.ndarray:
    return np.maximum(_renyi(logp, logq, alpha), _renyi(logq, logp, alpha))


def _mixture(lam: np.ndarray, priv: np.ndarray, pub: np.ndarray) -> np.ndarray:
    return lam[..., None] * priv + (1.0 - lam[..., None]) * pub[:, None, :]  # (N, m, V)


def _largest_feasible_lambda(priv: np.ndarray, pub: np.ndarray, cap: np.ndarray, alpha: float, steps: int) -> np.ndarray:
    """Bisection for every (case, group) at once; returns a lambda checked feasible."""
    log_pub = _log(pub)[:, None, :]  # (N, 1, V)
    lo = np.zeros(cap.shape)
    hi = np.ones(cap.shape)
    full = _symmetric(_log(_mixture(hi, priv, pub)), log_pub, alpha) <= cap
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        feasible = _symmetric(_log(_mixture(mid, priv, pub)), log_pub, alpha) <= cap
        lo, hi = np.where(feasible, mid, lo), np.where(feasible, hi, mid)
    return np.where(full, 1.0, lo)


def _normalise(x: np.ndarray) -> np.ndarray:
    return x / x.sum(axis=-1, keepdims=True)


def _distributions(rng: np.random.Generator, kind: str, n: int, m: int, v: int) -> tuple[np.ndarray, np.ndarray]:
    """Public (N, V) and private (N, m, V) distributions of one adversarial family."""
    concentration = rng.choice([0.05, 0.5, 1.0, 5.0])
    pub = rng.dirichlet(np.full(v, concentration), size=n)  # (N, V)
    priv = rng.dirichlet(np.full(v, rng.choice([0.05, 0.5, 1.0])), size=(n, m))  # (N, m, V)
    if kind == "peaked":
        pub = _normalise(np.exp(rng.gumbel(size=(n, v)) * 25.0 - 700.0))  # many entries underflow to exact 0
        priv = _normalise(np.exp(rng.gumbel(size=(n, m, v)) * 25.0 - 700.0))
        pub = _normalise(pub + (pub.max(axis=-1, keepdims=True) == pub))  # keep at least one public token
    elif kind == "tiny_public":
        tiny = rng.random((n, v)) < 0.4
        tiny[:, 0] = False
        pub = _normalise(np.where(tiny, 1e-30, pub))
    elif kind == "zero_public":
        zero = rng.random((n, v)) < 0.4
        zero[:, 0] = False
        pub = _normalise(np.where(zero, 0.0, pub))
        respects_support = rng.random((n, m, 1)) < 0.5
        priv = _normalise(np.where(respects_support & zero[:, None, :], 0.0, priv) + 1e-300 * ~zero[:, None, :])
    elif kind == "identical":
        same = rng.random((n, m, 1)) < 0.7
        priv = np.where(same, pub[:, None, :], priv)
    elif kind == "onehot":
        target = np.argmin(pub, axis=-1)  # the public model's least likely token
        priv = np.zeros((n, m, v))
        priv[np.arange(n), :, target] = 1.0
    return pub, priv


def _check_batch(
    rng: np.random.Generator, kind: str, n: int, m: int, v: int, alpha: float, steps: int = 25
) -> tuple[int, np.ndarray, np.ndarray]:
    pub, priv = _distributions(rng, kind, n, m, v)
    cap = np.exp(rng.uniform(np.log(1e-3), np.log(2.0), size=(n, m)))  # (N, m)
    lam = _largest_feasible_lambda(priv, pub, cap, alpha, steps)  # (N, m)
    mixed = _mixture(lam, priv, pub)  # (N, m, V)
    assert np.all(_symmetric(_log(mixed), _log(pub)[:, None, :], alpha) <= cap)
    out = mixed.mean(axis=1)  # (N, V)
    log_out = _log(out)
    bound = np.vectorize(lambda c: dp_fusion_rdp_per_token(alpha=alpha, beta=c / alpha, groups=m))(cap)  # (N, m)
    worst = np.empty((n, m))
    for i in range(m):
        neighbour = mixed.copy()
        neighbour[:, i, :] = pub
        log_neighbour = _log(neighbour.mean(axis=1))  # (N, V)
        worst[:, i] = _symmetric(log_out, log_neighbour, alpha)
    violations = worst > bound + TOLERANCE
    assert not violations.any(), f"bound exceeded: kind={kind} V={v} m={m} alpha={alpha:.3f} excess={np.max(worst - bound):.3g}"
    return n * m, lam, worst / bound


def test_bound_holds_on_random_and_adversarial_cases():
    rng = np.random.default_rng(20240611)
    cases = 0
    for kind in KINDS:
        for v in (2, 3, 5, 20, 50, 1000):
            for m in (1, 2, 3, 5, 8):
                alpha = 2.0 if rng.random() < 0.3 else float(rng.uniform(1.5, 10.0))
                n = 70 if v < 1000 else 4
                checked, _, _ = _check_batch(rng, kind, n, m, v, alpha)
                cases += checked // m
    assert cases >= 10_000


def test_bound_holds_at_a_large_vocabulary():
    rng = np.random.default_rng(7)
    for kind in ("tiny_public", "zero_public"):
        _check_batch(rng, kind, 1, 2, 151_936, 2.0, steps=20)


def test_bound_is_tight_for_one_group():
    rng = np.random.default_rng(3)
    attained = []
    for kind in ("dirichlet", "peaked"):  # with 1e-30 public entries the cap binds at lambda < 1e-6
        for alpha in (1.5, 2.0, 7.0):
            _, lam, ratio = _check_batch(rng, kind, 200, 1, 20, alpha, steps=55)
            attained.append(ratio[(lam > 1e-6) & (lam < 1.0)])
    attained = np.concatenate(attained)
    assert attained.size >= 100
    np.testing.assert_allclose(attained, 1.0, rtol=1e-4)
