"""Per-token private prediction mechanisms (one module each); row 0 of the logits is public."""

from tokendp.mechanisms.base import Mechanism, MechanismStep, NoGuaranteeError
from tokendp.mechanisms.dp_fusion import DPFusion

__all__ = ["DPFusion", "Mechanism", "MechanismStep", "NoGuaranteeError"]
