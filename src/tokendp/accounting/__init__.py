"""tokendp.accounting: privacy accounting in pure numpy/scipy (no torch).

Events describe what one released token costs; the Ledger composes them per protected unit;
the conversions turn RDP and zCDP into (epsilon, delta); the per-mechanism accountants give the
per-token bounds, totals and calibrations. Math and proofs: docs/privacy.md.
"""

from tokendp.accounting.events import PrivacyEvent, PureDpEvent, RdpEvent, ZcdpEvent
from tokendp.accounting.ledger import Ledger
from tokendp.accounting.mechanisms import (
    amin_epsilon,
    amin_rho_per_token,
    amin_switch_epsilon,
    amin_switch_noise,
    amin_switch_sensitivity,
    dp_decoding_epsilon,
    dp_decoding_epsilon_per_token,
    dp_decoding_lam,
    dp_fusion_beta,
    dp_fusion_epsilon,
    dp_fusion_rdp_per_token,
    dp_prompt_epsilon,
    dp_prompt_epsilon_per_token,
    dp_prompt_temperature,
    invisibleink_clip,
    invisibleink_epsilon,
    invisibleink_rho_per_token,
)
from tokendp.accounting.rdp import (
    DEFAULT_ORDERS,
    INTEGER_ORDERS,
    compose_rdp,
    conversion_offset,
    dp_sgd_epsilon,
    dp_sgd_rdp,
    poisson_subsampled_rdp,
    pure_dp_to_rdp,
    rdp_to_epsilon,
    rdp_to_epsilon_and_order,
    subsampled_gaussian_rdp,
)
from tokendp.accounting.zcdp import (
    bounded_range_to_zcdp,
    epsilon_to_zcdp,
    pure_dp_to_zcdp,
    zcdp_optimal_order,
    zcdp_to_epsilon,
)

__all__ = [
    "DEFAULT_ORDERS",
    "INTEGER_ORDERS",
    "Ledger",
    "PrivacyEvent",
    "PureDpEvent",
    "RdpEvent",
    "ZcdpEvent",
    "amin_epsilon",
    "amin_rho_per_token",
    "amin_switch_epsilon",
    "amin_switch_noise",
    "amin_switch_sensitivity",
    "bounded_range_to_zcdp",
    "compose_rdp",
    "conversion_offset",
    "dp_decoding_epsilon",
    "dp_decoding_epsilon_per_token",
    "dp_decoding_lam",
    "dp_fusion_beta",
    "dp_fusion_epsilon",
    "dp_fusion_rdp_per_token",
    "dp_prompt_epsilon",
    "dp_prompt_epsilon_per_token",
    "dp_prompt_temperature",
    "dp_sgd_epsilon",
    "dp_sgd_rdp",
    "epsilon_to_zcdp",
    "invisibleink_clip",
    "invisibleink_epsilon",
    "invisibleink_rho_per_token",
    "poisson_subsampled_rdp",
    "pure_dp_to_rdp",
    "pure_dp_to_zcdp",
    "rdp_to_epsilon",
    "rdp_to_epsilon_and_order",
    "subsampled_gaussian_rdp",
    "zcdp_optimal_order",
    "zcdp_to_epsilon",
]
