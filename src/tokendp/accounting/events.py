"""Frozen privacy events: what one released token costs, from public parameters only.

An event describes the privacy loss of one mechanism invocation for one protected unit
(a privacy group, a reference, a shard). Mechanisms return a mapping ``unit -> event`` per
generated token; a :class:`~tokendp.accounting.ledger.Ledger` composes them. Data-dependent
quantities (realised divergences or mixing weights) are diagnostics and never events.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokendp.accounting._checks import check_nonnegative, check_order, check_positive, check_rate


@dataclass(frozen=True)
class PureDpEvent:
    """An epsilon-DP mechanism (pure DP, delta = 0)."""

    epsilon: float

    def __post_init__(self) -> None:
        check_nonnegative("epsilon", self.epsilon)


@dataclass(frozen=True)
class RdpEvent:
    """A mechanism that is (alpha, rdp)-RDP at the single order ``alpha`` > 1 (Mironov 2017, Def. 4)."""

    alpha: float
    rdp: float

    def __post_init__(self) -> None:
        check_order(self.alpha)
        check_nonnegative("rdp", self.rdp)


@dataclass(frozen=True)
class ZcdpEvent:
    """A rho-zCDP mechanism (Bun and Steinke 2016, Def. 1.1): RDP alpha*rho at every order alpha > 1."""

    rho: float

    def __post_init__(self) -> None:
        check_nonnegative("rho", self.rho)


@dataclass(frozen=True)
class SubsampledGaussianEvent:
    """One DP-SGD step: the Gaussian mechanism (sensitivity 1, noise std ``noise_multiplier``)
    on a Poisson subsample of rate ``sampling_rate``, add/remove adjacency (Mironov, Talwar,
    Zhang 2019). Its RDP is known exactly at integer orders only
    (:func:`~tokendp.accounting.rdp.subsampled_gaussian_rdp`)."""

    sampling_rate: float
    noise_multiplier: float

    def __post_init__(self) -> None:
        check_rate("sampling_rate", self.sampling_rate)
        check_positive("noise_multiplier", self.noise_multiplier)


PrivacyEvent = PureDpEvent | RdpEvent | ZcdpEvent | SubsampledGaussianEvent
