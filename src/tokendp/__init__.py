"""tokendp: token-level differential privacy for large language models.

Everything a user reaches for first is here, exported lazily (importing ``tokendp`` does not
import torch; each name imports its module on first use):

- the jobs, plain functions: ``tokendp.sanitize(text, epsilon=8)``,
  ``tokendp.sanitize_batch(texts, ...)``,
  ``tokendp.generate(question, context=text, untrusted=[page], epsilon=4)``,
  ``tokendp.synthesize(references, epsilon=4, delta=1e-5, references_per_text=8, max_new_tokens=200)``,
  ``tokendp.predict(prompts, ensemble="ens/", queries=256, epsilon=8, delta=1e-5)``,
  ``tokendp.finetune(data, out="ft/", model="tiny", config=tokendp.FinetuneConfig(...))``;
  their modules (prepare/run steps, reports, helpers) are :mod:`tokendp.jobs.sanitize`,
  :mod:`tokendp.jobs.generate`, :mod:`tokendp.jobs.synthesize`, :mod:`tokendp.jobs.predict` and
  :mod:`tokendp.jobs.finetune`;
- tagging: ``tokendp.tag(text, tagger="auto") -> list[Span]``, ``tokendp.Span``;
- models: ``tokendp.HFBackend`` (a transformers causal LM, or a peft model, with its tokenizer,
  as a batched next-token backend; every job also takes the model object itself with
  ``model=..., tokenizer=...``);
- the accountants (pure math, no torch; the full set is :mod:`tokendp.accounting`):
  ``dp_fusion_epsilon``, ``dp_fusion_beta``, ``invisibleink_epsilon``, ``invisibleink_clip``,
  ``amin_epsilon``, ``pmixed_epsilon``, ``pmixed_beta``, ``calibrate_noise_multiplier``,
  ``dp_decoding_epsilon``, ``dp_prompt_epsilon``, ``Ledger``, and for DP-SGD
  ``dp_sgd_pld_epsilon``, the default accountant (privacy loss distribution; the one
  ``tokendp finetune`` and ``tokendp account dpsgd`` report, close to Opacus's PRV accountant;
  needs the ``train`` extra), and ``dp_sgd_epsilon``, the looser RDP bound (``--accountant rdp``,
  Opacus's ``RDPAccountant``).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_ACCOUNTANTS = ("dp_fusion_epsilon", "dp_fusion_beta", "invisibleink_epsilon", "invisibleink_clip", "amin_epsilon",
                "pmixed_epsilon", "pmixed_beta", "dp_sgd_pld_epsilon", "dp_sgd_epsilon",
                "calibrate_noise_multiplier", "dp_decoding_epsilon", "dp_prompt_epsilon", "Ledger")

# name -> the module that defines it
_LAZY = {
    **dict.fromkeys(("sanitize", "sanitize_batch", "SanitizeResult", "SanitizeReport"), "tokendp.jobs.sanitize"),
    **dict.fromkeys(("generate", "generate_batch", "GenerateResult", "GenerateReport"), "tokendp.jobs.generate"),
    **dict.fromkeys(("synthesize", "Synthesizer", "SyntheticText"), "tokendp.jobs.synthesize"),
    **dict.fromkeys(("predict", "PredictResult"), "tokendp.jobs.predict"),
    **dict.fromkeys(("finetune", "FinetuneConfig"), "tokendp.jobs.finetune"),
    "tag": "tokendp.text.taggers",
    "Span": "tokendp.text.spans",
    "HFBackend": "tokendp.backends",
    "sanitize_dataset": "tokendp.integrations.datasets",
    **dict.fromkeys(_ACCOUNTANTS, "tokendp.accounting"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later look-ups skip __getattr__
        return value
    raise AttributeError(f"module 'tokendp' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = ["__version__", *sorted(_LAZY)]
