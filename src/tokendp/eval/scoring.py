"""Teacher forcing: next-token logits of a fixed continuation after each of several prompts.

Row r is ``prompt_r + continuation``; one forward pass per batch of rows (left padded, with
an explicit attention mask and position ids, so padding changes nothing) returns the logits
at the positions that predict the continuation's tokens, and only those (``logits_to_keep``:
the logits of the prompt positions are never computed). No sampling is involved, so the
perplexity and the attack scores built on these logits are deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tokendp.backends import HFBackend
from tokendp.errors import InvalidInputError


def continuation_logits(backend: HFBackend, prompts: Sequence[Sequence[int]], continuation: Sequence[int],
                        *, batch_rows: int = 16, adapters: Sequence[str] | None = None) -> torch.Tensor:
    """Logits ``# (R, n, V)`` float32: row r, position t predicts ``continuation[t]`` after ``prompts[r]``.

    Rows are run ``batch_rows`` at a time; the result lives on the backend's device. With
    ``adapters`` (one peft adapter name per row, ``"__base__"`` for the base model) the rows
    run as a mixed-adapter batch, each through its own LoRA adapter.
    """
    n = len(continuation)
    if n == 0 or not prompts or any(len(p) == 0 for p in prompts):
        raise InvalidInputError("teacher forcing needs non-empty prompts and a non-empty continuation")
    if adapters is not None and len(adapters) != len(prompts):
        raise InvalidInputError("give one adapter name per prompt")
    limit = backend.max_context
    longest = max(len(p) for p in prompts) + n - 1
    if limit is not None and longest > limit:
        raise InvalidInputError(
            f"a scored row has {longest} tokens, more than the model's context of {limit}: "
            "lower --max-chars or --max-new-tokens")
    rows = [(*p, *continuation[:-1]) for p in prompts]
    parts = [_forward(backend, rows[i:i + batch_rows], n, None if adapters is None else adapters[i:i + batch_rows])
             for i in range(0, len(rows), batch_rows)]
    return torch.cat(parts, dim=0)


@torch.inference_mode()
def _forward(backend: HFBackend, rows: Sequence[Sequence[int]], keep: int,
             adapters: Sequence[str] | None = None) -> torch.Tensor:
    """Logits of the last ``keep`` positions of each left-padded row ``# (B, keep, V)``."""
    width = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)  # (B, L); pad id is masked out
    mask = torch.zeros((len(rows), width), dtype=torch.long)  # (B, L)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, L)
    dev = backend.device
    extra = {} if adapters is None else {"adapter_names": list(adapters)}
    out = backend.model(input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=positions.to(dev),
                        use_cache=False, logits_to_keep=keep, **extra)
    return out.logits[:, -keep:, :].float()  # (B, keep, V)
