"""Language-model backends: batched, KV-cached next-token logits for rows of token ids."""

from tokendp.backends.hf import DecodeState, HFBackend, load_backend, load_model
from tokendp.backends.rows import Row, RowSequence

__all__ = ["DecodeState", "HFBackend", "Row", "RowSequence", "load_backend", "load_model"]
