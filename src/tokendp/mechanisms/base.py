"""The per-step mechanism contract: logits of R rows in, next-token log-probabilities out.

Row 0 of the R axis is always the public row. A mechanism is built from its public
parameters; ``step`` is a pure, vectorised function of the logits (no Python loop over
sequences, groups or vocabulary); ``event`` gives what one generated token costs each
protected unit, computed from public parameters only. Sampling is the caller's job (it draws
from ``logprobs`` with a ``torch.Generator``), except for mechanisms that need noise of their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor

from tokendp.accounting._checks import check_nonnegative, check_positive  # noqa: F401 (re-exported to the mechanisms)
from tokendp.accounting.events import PrivacyEvent
from tokendp.errors import InvalidInputError, TokenDPError

__all__ = ["Mechanism", "MechanismStep", "NoGuaranteeError"]


class NoGuaranteeError(TokenDPError):
    """Asked for the privacy event of a mechanism that gives no guarantee (it is not free)."""


@dataclass(frozen=True)
class MechanismStep:
    """One step's output: ``logprobs`` (..., V) float32 or float64, and data-dependent diagnostics.

    Diagnostics (realised mixing weights, divergences, set sizes) describe this step only;
    they are never the privacy guarantee, which comes from ``Mechanism.event``.
    """

    logprobs: Tensor  # (..., V) float32 or float64
    diagnostics: dict[str, Tensor] = field(default_factory=dict)


@runtime_checkable
class Mechanism(Protocol):
    """A per-token private prediction mechanism (see the module docstring)."""

    name: str

    def step(self, logits: Tensor, *args: Any, **kwargs: Any) -> MechanismStep:
        """Logits (..., R, V), row 0 public -> next-token log-probabilities (..., V)."""
        ...

    def event(self, *args: Any, **kwargs: Any) -> Mapping[str, PrivacyEvent]:
        """The privacy event one generated token charges each protected unit."""
        ...


def check_logits(logits: Tensor, *, min_rows: int) -> None:
    """Logits must be a floating tensor (..., R, V) with R >= min_rows and V >= 1."""
    if not isinstance(logits, Tensor) or not logits.is_floating_point():
        raise InvalidInputError("logits must be a floating-point tensor of shape (..., R, V)")
    if logits.dim() < 2 or logits.shape[-2] < min_rows or logits.shape[-1] < 1:
        raise InvalidInputError(f"logits must have shape (..., R, V) with R >= {min_rows} rows (row 0 public), got {tuple(logits.shape)}")


def log_softmax_at(logits: Tensor, temperature: float) -> Tensor:
    """log softmax(logits / temperature) in float32, (..., V) -> (..., V)."""
    logits = logits.to(torch.float32)
    return torch.log_softmax(logits if temperature == 1.0 else logits / temperature, dim=-1)
