"""The service's composition across requests rounds its epsilon up: never below the exact value
of the RDP curves it adds (docs/privacy.md, "Rounding of reported epsilons")."""

from __future__ import annotations

import exact_privacy as ref
import mpmath
import numpy as np

from tokendp.accounting import DEFAULT_ORDERS, dp_fusion_rdp_per_token
from tokendp.service import composition
from tokendp.service.composition import Charge


def _exact(charges: list[Charge], delta: float) -> mpmath.mpf:
    """The exact epsilon of the composition: the conversion of the summed curves minimised over
    the grid (a zCDP-only composition may also take the exact zCDP conversion)."""
    orders = sorted({*DEFAULT_ORDERS, *(c.alpha for c in charges if c.alpha is not None)})
    best = min(ref.rdp_epsilon(mpmath.fsum(_curve(c, a) for c in charges), a, delta) for a in orders)
    if all(c.kind == "zcdp" for c in charges):
        best = min(best, ref.zcdp_epsilon(mpmath.fsum(ref.m(c.value) for c in charges), delta))
    return best


def _curve(charge: Charge, alpha: float) -> mpmath.mpf:
    if charge.value == 0:
        return mpmath.mpf(0)
    if charge.kind == "zcdp":
        return ref.m(alpha) * ref.m(charge.value)
    return ref.m(charge.value) if alpha <= charge.alpha else mpmath.inf


def test_composed_epsilon_is_never_below_the_exact_grid_value():
    rng = np.random.default_rng(0)
    with mpmath.workdps(60):
        for case in range(150):
            delta = float(rng.uniform(0.5, 0.99)) if case % 3 == 0 else float(10 ** rng.uniform(-12, -2))
            charges = []
            for _ in range(int(rng.integers(1, 6))):
                alpha = float(rng.choice([1.5, 2.0, 3.0, 4.5, 8.0]))
                t = int(rng.integers(1, 2000))
                r = dp_fusion_rdp_per_token(alpha=alpha, beta=float(10 ** rng.uniform(-6, -1)), groups=int(rng.integers(1, 6)))
                charges.append(Charge("rdp", t * r, alpha) if case % 2 else Charge("zcdp", float(10 ** rng.uniform(-6, 0))))
            got, want = composition.epsilon(charges, delta=delta), _exact(charges, delta)
            assert want <= got <= want + 1e-9 * (want + 1)
