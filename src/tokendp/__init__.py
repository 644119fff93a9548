"""tokendp: token-level differential privacy for large language models.

The jobs are exported lazily (importing ``tokendp`` does not import torch):
``tokendp.sanitize(text, epsilon=8)``, ``tokendp.sanitize_batch(texts, ...)``,
``tokendp.synthesize(references, epsilon=4, delta=1e-5, batch_size=8, max_tokens=200)``,
``tokendp.predict(prompts, ensemble="ens/", queries=256, epsilon=8, delta=1e-5)``,
``tokendp.generate(question, context=text, untrusted=[page], epsilon=4)``.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "sanitize": "tokendp.sanitize",
    "sanitize_batch": "tokendp.sanitize",
    "SanitizeResult": "tokendp.sanitize",
    "SanitizeReport": "tokendp.sanitize",
    "synthesize": "tokendp.synthesize",
    "SyntheticText": "tokendp.synthesize",
    "predict": "tokendp.predict",
    "PredictResult": "tokendp.predict",
    "generate": "tokendp.generate",
    "generate_batch": "tokendp.generate",
    "GenerateResult": "tokendp.generate",
}


def __getattr__(name: str) -> Any:
    if name in ("sanitize", "synthesize", "predict", "generate"):
        # the job modules (tokendp.sanitize, tokendp.generate, ...) are callable: tokendp.sanitize(text, ...)
        # runs the job, whichever of the module or the function Python bound to the name first
        return importlib.import_module(f"tokendp.{name}")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tokendp' has no attribute {name!r}")


__all__ = ["GenerateResult", "PredictResult", "SanitizeReport", "SanitizeResult", "SyntheticText", "__version__",
           "generate", "generate_batch", "predict", "sanitize", "sanitize_batch", "synthesize"]
