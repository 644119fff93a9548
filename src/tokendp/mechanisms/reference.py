"""The two non-private references every evaluation compares against.

``Original`` decodes from the private context alone: it is NOT private, and its ``event``
raises :class:`~tokendp.mechanisms.base.NoGuaranteeError` so that it can never be charged as
if it were free. ``Public`` decodes from the public context alone (row 0: the document with
every protected span replaced by placeholders). Its output is a function of public data only,
so it is 0-DP for every unit: ``event`` returns an empty mapping, i.e. nothing to charge.
"""

from __future__ import annotations

from torch import Tensor

from tokendp.accounting.events import PrivacyEvent
from tokendp.mechanisms.base import MechanismStep, NoGuaranteeError, check_logits, check_positive, log_softmax_at

__all__ = ["Original", "Public"]


class Original:
    """log_softmax(row 1 / temperature): the private context only, no privacy."""

    name = "original"

    def step(self, logits: Tensor, *, temperature: float = 1.0) -> MechanismStep:
        check_logits(logits, min_rows=2)
        return MechanismStep(log_softmax_at(logits[..., 1, :], check_positive("temperature", temperature)), {})

    def event(self) -> dict[str, PrivacyEvent]:
        raise NoGuaranteeError("the 'original' reference reads the private context and gives no privacy guarantee")


class Public:
    """log_softmax(row 0 / temperature): the public context only, epsilon 0 for every unit."""

    name = "public"

    def step(self, logits: Tensor, *, temperature: float = 1.0) -> MechanismStep:
        check_logits(logits, min_rows=1)
        return MechanismStep(log_softmax_at(logits[..., 0, :], check_positive("temperature", temperature)), {})

    def event(self) -> dict[str, PrivacyEvent]:
        """Nothing to charge: the output never reads private data."""
        return {}
