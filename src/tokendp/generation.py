"""The decoding loop: backend -> mechanism -> ledger -> sampler, for many documents at once.

Each document is a :class:`~tokendp.backends.RowSequence` of R_n rows (row 0 public). At
every step the backend gives next-token logits for all rows of all unfinished documents;
they are laid out as ``(N, R, V)`` (R = the largest R_n; a shorter document's padding rows
repeat its public row and its mechanism masks them out), the mechanism turns them into one
next-token distribution per document, the ledger is charged **before** anything is sampled
(check then commit: a refused charge raises and nothing is released), then one token per
document is sampled from a ``torch.Generator`` and appended to all of its rows.

The number of steps T = ``max_new_tokens`` is fixed before generation; a privacy
certificate must count all T tokens even when a document stops early (on EOS or a stop
string), because the stopping time itself depends on the private text.

The only host-device synchronisation per step is the transfer of the N sampled token ids,
which the host needs for stop checks and streaming (:func:`tokendp.sampling.sample_to_host`,
an exact draw from the step's distribution however small its probabilities).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import torch

from tokendp.backends import HFBackend, RowSequence
from tokendp.errors import InvalidParameterError
from tokendp.logits_processors import PublicLogitsProcessor, apply_to_rows
from tokendp.sampling import sample, sample_to_host  # noqa: F401 (sample: re-exported, tokendp.generation.sample)

StopReason = Literal["eos", "stop_string", "max_new_tokens"]


class StepFn(Protocol):
    """A mechanism bound to its parameters: logits ``# (Na, R, V)`` of the active documents
    ``docs # (Na,)`` (indices into the batch) -> an object with ``logprobs # (Na, V)`` and
    ``diagnostics`` (tensors with leading axis Na)."""

    def __call__(self, logits: torch.Tensor, docs: torch.Tensor, temperature: float) -> Any: ...


@dataclass(frozen=True)
class Generated:
    """One document's output: only the generated text and its token ids."""

    text: str
    token_ids: tuple[int, ...]
    stop_reason: StopReason
    diagnostics: dict[str, torch.Tensor] = field(default_factory=dict)  # per-step means


def make_generator(seed: int | None = None, device: str | torch.device = "cpu") -> torch.Generator:
    """A ``torch.Generator`` seeded with ``seed``, or from the OS (``secrets``) when None.

    A seed makes runs reproducible; the OS-seeded mode ("secure") makes the sampled
    randomness unpredictable to anyone who sees the code and the parameters.
    """
    gen = torch.Generator(device=device)
    gen.manual_seed(secrets.randbits(63) if seed is None else int(seed))
    return gen


class _StopChecker:
    """Host-side stop checks on one document's growing list of token ids."""

    def __init__(self, tokenizer: Any, eos_ids: set[int], stop_strings: Sequence[str],
                 limits: Sequence[int]) -> None:
        self.tokenizer, self.eos_ids, self.stops = tokenizer, eos_ids, tuple(s for s in stop_strings if s)
        self.limits = limits
        self.tail = 4 * max((len(s) for s in self.stops), default=0) + 2  # tokens that can hold a stop

    def check(self, doc: int, ids: list[int]) -> StopReason | None:
        if ids[-1] in self.eos_ids:
            return "eos"
        if self.stops:
            tail = self.tokenizer.decode(ids[-self.tail:], skip_special_tokens=False)
            if any(s in tail for s in self.stops):
                return "stop_string"
        return "max_new_tokens" if len(ids) >= self.limits[doc] else None

    def text(self, ids: list[int], reason: StopReason | None) -> tuple[str, list[int]]:
        """The text of ``ids`` without the EOS token and cut before the first stop string."""
        if reason == "eos":
            ids = ids[:-1]
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        if reason == "stop_string":
            text = text[:min(text.find(s) for s in self.stops if s in text)]
        for special in self.tokenizer.all_special_tokens:
            text = text.replace(special, "")
        return text, ids


def generate(backend: HFBackend, sequences: Sequence[RowSequence], step: StepFn, *,
             max_new_tokens: int | Sequence[int], generator: torch.Generator, temperature: float = 1.0,
             eos_ids: Sequence[int] | None = None, stop_strings: Sequence[str] = (),
             charge: Callable[[list[int]], None] | None = None,
             on_token: Callable[[int, int], None] | None = None,
             logits_processor: PublicLogitsProcessor | None = None) -> list[Generated]:
    """Generate up to ``max_new_tokens`` tokens (one int, or one per sequence) for every
    sequence; see the module docstring.

    ``temperature`` is passed to ``step``; 0 means greedy (the argmax of the mechanism's
    distribution, computed at temperature 1): only for comparisons without privacy.
    ``charge(docs)`` is called once per step with the indices of the documents about to
    sample, before sampling. ``on_token(doc, token_id)`` streams every sampled token.
    ``logits_processor`` (repetition penalty, no-repeat n-grams, minimum length) adjusts every
    row's logits before the mechanism, from the tokens released so far only, the same for all
    rows of a document, so the guarantee is unchanged (docs/privacy.md, "Common ground").
    """
    limits = [max_new_tokens] * len(sequences) if isinstance(max_new_tokens, int) else list(max_new_tokens)
    if len(limits) != len(sequences) or not all(isinstance(t, int) and t >= 1 for t in limits):
        raise InvalidParameterError(
            f"max_new_tokens must be an integer >= 1 (or one per sequence), got {max_new_tokens!r}")
    if not (temperature >= 0):
        raise InvalidParameterError(f"temperature must be >= 0, got {temperature!r}")
    eos = set(eos_ids if eos_ids is not None else [backend.tokenizer.eos_token_id]) - {None}
    checker = _StopChecker(backend.tokenizer, eos, stop_strings, limits)
    n = len(sequences)
    outputs: list[list[int]] = [[] for _ in range(n)]
    reasons: list[StopReason | None] = [None] * n
    active = list(range(n))
    sums: dict[str, torch.Tensor] = {}
    twins = [public_twins(seq) for seq in sequences]
    state, flat = backend.prefill(sequences)
    for t in range(max(limits)):
        docs = torch.tensor(active, device=flat.device)
        if logits_processor is not None:  # public: the released ids only, every row alike
            flat = apply_to_rows(logits_processor, flat, state.row_sequence, [outputs[d] for d in active])
        logits = _layout(flat, state.rows_per_sequence, [twins[i] for i in active])
        out = step(logits, docs, temperature if temperature > 0 else 1.0)
        _accumulate(sums, out.diagnostics, docs, n)
        if charge is not None:
            charge(list(active))
        tokens = sample_to_host(out.logprobs, generator, greedy=temperature == 0)  # (Na,) on the host
        finished = _append(tokens.tolist(), active, outputs, reasons, checker, on_token)
        if t == max(limits) - 1:
            break
        if finished:
            keep = torch.tensor([i not in finished for i in active])
            state = backend.keep(state, keep)
            tokens = tokens[keep.to(tokens.device)]
            active = [i for i in active if i not in finished]
            if not active:
                break
        flat = backend.decode(state, tokens)
    steps = torch.tensor([len(o) for o in outputs], dtype=torch.float32)
    results = []
    for i in range(n):
        text, ids = checker.text(outputs[i], reasons[i])
        diag = {k: (v[i] / steps[i].to(v.device)).cpu() for k, v in sums.items()}
        results.append(Generated(text, tuple(ids), reasons[i] or "max_new_tokens", diag))
    return results


def public_twins(sequence: RowSequence) -> tuple[int, ...]:
    """Rows of ``sequence`` that hold exactly the public row's tokens and adapter.

    Every row receives the same tokens, so a twin stays one for the whole generation. Its
    logits are taken from the public row (:func:`_layout`): a batched forward pass need not
    give identical rows identical logits (kernels may round rows by their position), and the
    privacy proofs compare a document with its neighbour, where a group's row IS the public row
    (docs/privacy.md, "Floating point").
    """
    public = sequence.rows[0]
    return tuple(i for i, row in enumerate(sequence.rows) if i > 0 and row == public)


def _layout(flat: torch.Tensor, rows_per_sequence: Sequence[int], twins: Sequence[tuple[int, ...]]) -> torch.Tensor:
    """Flat logits ``# (Rtot, V)`` -> ``# (N, R, V)``; a view when all sequences have R rows and no twins."""
    if len(set(rows_per_sequence)) == 1 and not any(twins):
        return flat.view(len(rows_per_sequence), rows_per_sequence[0], flat.shape[-1])
    return flat[_gather_index(rows_per_sequence, twins, flat.device)]


def _gather_index(rows_per_sequence: Sequence[int], twins: Sequence[tuple[int, ...]], device: torch.device) -> torch.Tensor:
    """Flat row index of (sequence, row) ``# (N, R)``; padding rows and twins of the public row point at it."""
    width = max(rows_per_sequence)
    starts = torch.cumsum(torch.tensor([0, *rows_per_sequence[:-1]]), 0)  # (N,)
    counts = torch.tensor(rows_per_sequence)  # (N,)
    r = torch.arange(width)  # (R,)
    own = r[None, :] < counts[:, None]  # (N, R): a row of its own, not padding
    for n, rows in enumerate(twins):
        own[n, list(rows)] = False
    return (starts[:, None] + torch.where(own, r[None, :], 0)).to(device)


def _accumulate(sums: dict[str, torch.Tensor], diagnostics: dict[str, torch.Tensor],
                docs: torch.Tensor, n: int) -> None:
    """Add this step's diagnostics (leading axis = active documents) into per-document sums."""
    for key, value in diagnostics.items():
        value = value.detach().float()
        if key not in sums:
            sums[key] = torch.zeros((n, *value.shape[1:]), dtype=torch.float32, device=value.device)
        if value.dim() == 2 and value.shape[1] < sums[key].shape[1]:
            # Per-row diagnostics narrow when the documents with the most rows have finished:
            # the rows the remaining documents lack are padding, which contributes 0.
            value = torch.nn.functional.pad(value, (0, sums[key].shape[1] - value.shape[1]))
        sums[key].index_add_(0, docs.to(value.device), value)


def _append(tokens: list[int], active: list[int], outputs: list[list[int]],
            reasons: list[StopReason | None], checker: _StopChecker,
            on_token: Callable[[int, int], None] | None) -> set[int]:
    """Append each active document's token; return the documents that stopped."""
    finished = set()
    for doc, tok in zip(active, tokens):
        outputs[doc].append(tok)
        if on_token is not None:
            on_token(doc, tok)
        reasons[doc] = checker.check(doc, outputs[doc])
        if reasons[doc] is not None:
            finished.add(doc)
    return finished
