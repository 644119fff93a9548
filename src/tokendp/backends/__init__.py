"""Language-model backends: batched, KV-cached next-token logits for rows of token ids."""

from tokendp.backends.hf import DecodeState, HFBackend, is_model_object, load_backend, load_model, model_label
from tokendp.backends.rows import Row, RowSequence

__all__ = ["DecodeState", "HFBackend", "Row", "RowSequence", "is_model_object", "load_backend", "load_model",
           "model_label"]
