"""A key/value cache that grows in place: one token's step writes one position, not a copy of all.

transformers' :class:`~transformers.cache_utils.DynamicLayer` appends each step's keys and values
with ``torch.cat``, which copies the layer's whole cache at every step: at a context of L
positions and N rows, ``2 N L`` vectors moved per layer per token, more than the attention itself
reads (one CPU core, 49 rows at 3,000 positions: 114 ms a layer for the copy against 57 ms for
the attention). :class:`GrowingLayer` keeps each layer's keys and values in a buffer with room to
spare along the sequence axis, ``# (N, H, capacity, D)``, writes new positions into it and hands
the attention a view of the first ``length``; a full buffer is reallocated a quarter larger (at
least :data:`MIN_ROOM` positions more), so the copies cost O(1) a token amortised. The values are
those ``DynamicLayer`` holds, position for position, and ``keys``/``values`` read and assign as
they do there (an assignment becomes the buffer, full).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicLayer

MIN_ROOM = 256  # positions a full buffer grows by, at least


class GrowingLayer(DynamicLayer):
    """A :class:`~transformers.cache_utils.DynamicLayer` whose ``keys``/``values`` are views of the
    first ``length`` positions of larger buffers."""

    def __init__(self) -> None:
        self._k = self._v = None  # (N, H, capacity, D)
        self.length = 0
        super().__init__()

    @property
    def keys(self) -> torch.Tensor | None:  # (N, H, length, D)
        return None if self._k is None else self._k[..., :self.length, :]

    @keys.setter
    def keys(self, value: torch.Tensor | None) -> None:
        self._k = value
        self.length = 0 if value is None else value.shape[-2]

    @property
    def values(self) -> torch.Tensor | None:  # (N, H, length, D)
        return None if self._v is None else self._v[..., :self.length, :]

    @values.setter
    def values(self, value: torch.Tensor | None) -> None:
        self._v = value

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``key_states``/``value_states # (N, H, S, D)`` after the cached positions; return
        the keys and values of all of them ``# (N, H, length + S, D)`` (views)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, end = self.length, self.length + key_states.shape[-2]
        if self._k is None or end > self._k.shape[-2]:
            self._reserve(key_states, value_states, end + max(MIN_ROOM, end // 4))
        self._k[..., start:end, :] = key_states
        self._v[..., start:end, :] = value_states
        self.length = end
        return self.keys, self.values

    def _reserve(self, key_states: torch.Tensor, value_states: torch.Tensor, capacity: int) -> None:
        """New buffers of ``capacity`` positions holding the cached ones."""
        k = key_states.new_empty((*key_states.shape[:-2], capacity, key_states.shape[-1]))
        v = value_states.new_empty((*value_states.shape[:-2], capacity, value_states.shape[-1]))
        if self.length:
            k[..., :self.length, :] = self.keys
            v[..., :self.length, :] = self.values
        self._k, self._v = k, v

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def crop(self, tokens_to_remove: int) -> None:
        """Forget the last ``-tokens_to_remove`` positions (a negative count, as DynamicLayer's)."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative number of positions to remove, got {tokens_to_remove}")
        self.length = max(0, self.length + tokens_to_remove)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows ``indices`` (repeats allowed), their room with them."""
        if self.get_seq_length() > 0:
            self._k, self._v = self._k[indices], self._v[indices]

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.get_seq_length() > 0:
            self._k = self._k.repeat_interleave(repeats, dim=0)
            self._v = self._v.repeat_interleave(repeats, dim=0)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self.batch_select_indices(beam_idx)


def growing(cache: Any) -> Any:
    """``cache`` (an empty DynamicCache) with each full-attention layer a :class:`GrowingLayer`;
    sliding-window and other layers stay as they were."""
    cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache
