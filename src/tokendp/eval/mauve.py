"""MAUVE between two sets of texts, on features from a causal LM's hidden states, and the
on-topic share.

MAUVE (Pillutla et al., NeurIPS 2021; JMLR 2023) embeds each text, quantises the union of the
two embedding sets into k clusters (PCA then k-means), and compares the two cluster histograms
P and Q through the divergence curve {(exp(-c KL(Q || R_l)), exp(-c KL(P || R_l))) : R_l = l P +
(1 - l) Q}; MAUVE is the area under it (1: the same distribution; c = 5). The ``mauve-text``
package computes it from features that we pass in. Its default featuriser (GPT-2 large) is not
available offline, so :func:`featurize` computes them from the model passed in (SmolLM2-135M by
default): the mean of the final layer's hidden states over a text's first ``max_tokens`` tokens
(cut so that lengths do not decide the score). MAUVE's own recipe takes the last token's state
instead; with SmolLM2 that state carries little of the topic: it put 90% of WikiText-2
paragraphs and 94% of Amin et al.'s word salad on topic for ECHR judgments (mean-pooled: 14% and
0%). Values are comparable only within one featuriser, sample size and cluster count.

On-topic share: with mu the mean of the unit-normalised features of the held-out real texts,
a text is on topic when its cosine similarity to mu is at least the 5th percentile of the
held-out texts' own similarities (so held-out real texts score about 0.95 by construction).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from tokendp._optional import require

ON_TOPIC_QUANTILE = 0.05


def featurize(model: Any, tokenizer: Any, texts: Sequence[str], *, max_tokens: int, batch_size: int = 16) -> np.ndarray:
    """Mean of the final-layer hidden states over each text's first ``max_tokens`` tokens, (n, d) float32.

    Texts are right-padded so that every real token keeps its position, and padding is left out
    of the mean; an empty text is read as the end-of-text token alone.
    """
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"][:max_tokens] or [eos] for t in texts]
    out = []
    with torch.inference_mode():
        for start in range(0, len(ids), batch_size):
            chunk = ids[start:start + batch_size]
            lengths = torch.tensor([len(r) for r in chunk])  # (b,)
            width = int(lengths.max())
            batch = torch.full((len(chunk), width), pad, dtype=torch.long)  # (b, L)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)  # (b, L)
            for i, r in enumerate(chunk):
                batch[i, :len(r)] = torch.tensor(r)
                mask[i, :len(r)] = 1
            hidden = model(input_ids=batch.to(model.device), attention_mask=mask.to(model.device),
                           output_hidden_states=True).hidden_states[-1]  # (b, L, d)
            weights = mask.to(hidden.device, hidden.dtype).unsqueeze(-1)  # (b, L, 1)
            mean = (hidden * weights).sum(1) / lengths.to(hidden.device, hidden.dtype).unsqueeze(-1)  # (b, d)
            out.append(mean.float().cpu().numpy())
    return np.concatenate(out).astype(np.float32)


def mauve_score(p_features: np.ndarray, q_features: np.ndarray, *, buckets: int, seeds: Sequence[int]) -> tuple[float, float]:
    """MAUVE of (p, q) with ``buckets`` clusters: the mean and standard deviation over k-means seeds."""
    mauve = require("mauve", "eval", "tokendp eval synthesize", package="mauve-text")
    scores = [mauve.compute_mauve(p_features=p_features, q_features=q_features, num_buckets=buckets, seed=s,
                                  verbose=False).mauve for s in seeds]
    return float(np.mean(scores)), float(np.std(scores))


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def on_topic_share(features: np.ndarray, held_out: np.ndarray) -> float:
    """Share of rows of ``features`` (n, d) whose cosine similarity to the held-out centroid
    reaches the held-out texts' own 5th percentile (module docstring)."""
    mu = _unit(_unit(held_out).mean(0))  # (d,)
    threshold = np.quantile(_unit(held_out) @ mu, ON_TOPIC_QUANTILE)
    return float(np.mean(_unit(features) @ mu >= threshold))
