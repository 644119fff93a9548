"""Per-token private prediction mechanisms (one module each); row 0 of the logits is public."""

from tokendp.mechanisms.amin import AminEtAl
from tokendp.mechanisms.base import Mechanism, MechanismStep, NoGuaranteeError
from tokendp.mechanisms.dp_decoding import DPDecoding
from tokendp.mechanisms.dp_fusion import DPFusion
from tokendp.mechanisms.dp_fusion_filter import DPFusionFilter, FilterStep, RenyiFilter
from tokendp.mechanisms.dp_prompt import DPPrompt
from tokendp.mechanisms.invisibleink import InvisibleInk
from tokendp.mechanisms.pmixed import PMixED
from tokendp.mechanisms.reference import Original, Public
from tokendp.mechanisms.svt import SparseVectorSwitch

__all__ = [
    "AminEtAl",
    "DPDecoding",
    "DPFusion",
    "DPFusionFilter",
    "DPPrompt",
    "FilterStep",
    "InvisibleInk",
    "Mechanism",
    "MechanismStep",
    "NoGuaranteeError",
    "Original",
    "PMixED",
    "RenyiFilter",
    "Public",
    "SparseVectorSwitch",
]
