"""A minimal LoRA (Hu et al., 2021) for Llama-style models: train, save, load, merge.

No dependency on ``peft``; adapters are saved in PEFT's layout (``adapter_config.json`` and
``adapter_model.safetensors`` with ``base_model.model.<module>.lora_A.weight`` /
``lora_B.weight`` keys), so ``peft.PeftModel.from_pretrained`` also reads them.

A wrapped linear layer computes ``W x + (alpha / r) B A x``; ``B`` starts at zero, so training
starts from the base model. For inference tokendp merges the adapter into the weights
(``W += (alpha / r) B A``): the rewriter then runs at exactly the base model's cost.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tokendp.errors import InvalidInputError

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
LLAMA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_PREFIX = "base_model.model."


class LoRALinear(nn.Module):
    """``base(x) + scale * B(A(dropout(x)))`` with a frozen ``base``."""

    def __init__(self, base: nn.Linear, r: int, alpha: float, dropout: float = 0.0) -> None:
        super().__init__()
        self.base = base
        self.r, self.scale = r, alpha / r
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)
        self.dropout = nn.Dropout(dropout) if dropout else nn.Identity()
        self.lora_A.to(base.weight.dtype)
        self.lora_B.to(base.weight.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.lora_B(self.lora_A(self.dropout(x))) * self.scale


def _targets(model: nn.Module, targets: Sequence[str]) -> list[tuple[str, nn.Module, str, nn.Linear]]:
    found = []
    for name, module in model.named_modules():
        for child_name, child in module.named_children():
            if child_name in targets and isinstance(child, nn.Linear):
                found.append((f"{name}.{child_name}" if name else child_name, module, child_name, child))
    return found


def add_lora(model: nn.Module, *, r: int, alpha: float, targets: Sequence[str] = LLAMA_TARGETS,
             dropout: float = 0.0) -> list[str]:
    """Freeze ``model`` and wrap every linear layer named in ``targets``; returns their names."""
    for p in model.parameters():
        p.requires_grad_(False)
    names = []
    for name, parent, child_name, child in _targets(model, targets):
        setattr(parent, child_name, LoRALinear(child, r, alpha, dropout))
        names.append(name)
    if not names:
        raise InvalidInputError(f"no linear layers named {list(targets)} in the model")
    return names


def lora_state_dict(model: nn.Module, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The adapter's tensors under PEFT's key names."""
    out = {}
    for name, module in model.named_modules():
        if isinstance(module, LoRALinear):
            for part in ("lora_A", "lora_B"):
                w = getattr(module, part).weight.detach()
                out[f"{_PREFIX}{name}.{part}.weight"] = (w.to(dtype) if dtype else w).cpu().contiguous()
    return out


def load_lora_state(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy adapter tensors (PEFT key names) into a model wrapped by :func:`add_lora`."""
    modules = dict(model.named_modules())
    for key, value in state.items():
        name, part = key[len(_PREFIX):].rsplit(".", 2)[:2]
        getattr(modules[name], part).weight.data.copy_(value)


def save_adapter(model: nn.Module, dest: str | Path, *, r: int, alpha: float,
                 targets: Sequence[str], base_model: str, dtype: torch.dtype = torch.float16,
                 extra: dict[str, Any] | None = None) -> Path:
    """Write ``adapter_config.json`` (PEFT's fields) and the tensors in ``dtype``."""
    from safetensors.torch import save_file

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    save_file(lora_state_dict(model, dtype), str(dest / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": alpha,
              "lora_dropout": 0.0, "target_modules": list(targets), "bias": "none",
              "base_model_name_or_path": base_model, "fan_in_fan_out": False,
              "inference_mode": True, **(extra or {})}
    (dest / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return dest


def read_adapter(path: str | Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(adapter_config, tensors) of a saved adapter directory."""
    from safetensors.torch import load_file

    path = Path(path)
    if not (path / ADAPTER_CONFIG).is_file() or not (path / ADAPTER_WEIGHTS).is_file():
        raise InvalidInputError(f"{path} is not a LoRA adapter directory (needs {ADAPTER_CONFIG} "
                                f"and {ADAPTER_WEIGHTS})")
    config = json.loads((path / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    return config, load_file(str(path / ADAPTER_WEIGHTS))


@torch.no_grad()
def merge_adapter(model: nn.Module, path: str | Path) -> int:
    """Add a saved adapter into the linear weights of a plain model: ``W += alpha/r B A``.

    Returns the number of layers changed.
    """
    config, tensors = read_adapter(path)
    scale = float(config["lora_alpha"]) / int(config["r"])
    modules = dict(model.named_modules())
    merged = 0
    for key, a in tensors.items():
        if not key.endswith("lora_A.weight"):
            continue
        name = key[len(_PREFIX):-len(".lora_A.weight")]
        b = tensors[key.replace("lora_A", "lora_B")]
        layer = modules.get(name)
        if not isinstance(layer, nn.Linear):
            raise InvalidInputError(f"the adapter at {path} does not fit this model (no layer {name})")
        w = layer.weight
        delta = b.to(w.device, torch.float32) @ a.to(w.device, torch.float32)  # (out, r) @ (r, in)
        w.copy_((w.float() + scale * delta).to(w.dtype))
        merged += 1
    return merged
