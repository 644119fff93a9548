"""The decoding loop: backend -> mechanism -> ledger -> sampler, for many documents at once.

Each document is a :class:`~tokendp.backends.RowSequence` of R_n rows (row 0 public). At
every step the backend gives next-token logits for all rows of all unfinished documents;
they are laid out as ``(N, R, V)`` (R = the largest R_n; a shorter document's padding rows
repeat its public row and its mechanism masks them out), the mechanism turns them into one
next-token distribution per document, the ledger is charged **before** anything is sampled
(check then commit: a refused charge raises and nothing is released), then one token per
document is sampled and appended to all of its rows. Each document may have its own random
stream (a ``torch.Generator`` per sequence, :func:`make_generators`): its k-th released token
then uses the k-th draw of its own stream, so its output does not depend on the other
documents of the batch, on the batch's order, or on speculative decoding (up to the
float32 rounding of batched logits, docs/design.md "Determinism").

The number of steps T = ``max_new_tokens`` is fixed before generation; a privacy
certificate must count all T tokens even when a document stops early (on EOS or a stop
string), because the stopping time itself depends on the private text.

The only host read per step is the transfer of the N sampled token ids, which the host needs
for stop checks and streaming (:func:`tokendp.sampling.sample_ids`, an exact draw from the
step's distribution however small its probabilities); the step itself reads nothing back from
an accelerator (docs/performance.md, "The step without host reads"). The index of the active
documents and the row layout are copied to the device once per set of active documents, not
per step.

Speculative decoding (``drafter=``, docs/privacy.md "Speculative decoding"). A forward pass
may run, after each document's last released token, K tokens guessed from public data
(:mod:`tokendp.drafts`); its logits at position j are then those of the prefix extended by the
first j guesses. The steps that follow are the one-token loop's, position by position: a
document takes step j only if the tokens sampled at positions < j all equalled its guesses, so
every step sees the logits of exactly the released prefix, is charged, sampled and released
as without drafts. A sampled token that differs from the guess is released too (it is the
residual draw of speculative sampling) and ends the document's round; the backend then rolls
the positions after the last released token back out of its cache. Step, charge and
sampler are called once per released token, as without drafts; only the passes are fewer.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import secrets
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import torch

from tokendp.backends import DecodeState, HFBackend, RowSequence
from tokendp.drafts import Drafter
from tokendp.errors import InvalidParameterError
from tokendp.logits_processors import PublicLogitsProcessor, apply_to_rows
from tokendp.sampling import Generators, sample, sample_ids  # noqa: F401 (sample: re-exported)

StopReason = Literal["eos", "stop_string", "repeated_line", "max_new_tokens", "cancelled"]


class StopDocument(Exception):  # noqa: N818 (a signal to the loop, not an error)
    """Raised by an ``on_token`` callback to end that document after the token it was given
    (stop reason ``"cancelled"``; the service's job whose client went away). The token was
    sampled and charged; the other documents of the batch go on."""


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


def document_seed(seed: int, key: str | int) -> int:
    """The seed of one document's stream: a hash of (``seed``, the document's key), 63 bits.

    A stable function (SHA-256 of the JSON of both, not Python's salted ``hash``), so that any
    process, machine or worker derives the same stream for the same document."""
    blob = json.dumps([int(seed), key], ensure_ascii=False).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:8], "big") >> 1


def make_generators(seed: int | Sequence[int] | None, n: int) -> list[torch.Generator]:
    """One CPU ``torch.Generator`` per document: ``seed`` an int (document i gets
    ``document_seed(seed, i)``), one seed per document (used as they are), or None (each from the
    OS). CPU streams: a draw is one 53-bit integer per document per token."""
    if seed is None or isinstance(seed, int):
        return [make_generator(None if seed is None else document_seed(seed, i)) for i in range(n)]
    seeds = list(seed)
    if len(seeds) != n or not all(isinstance(s, int) for s in seeds):
        raise InvalidParameterError(f"seed must be an int or one int per document ({n}), got {seed!r}")
    return [make_generator(s) for s in seeds]


def repeated_line(text: str) -> int | None:
    """Where the last complete line of ``text`` starts if it repeats an earlier one, else None.

    Lines are compared stripped of surrounding white space; blank lines never count, and the
    text after the last line break is not a complete line yet. A function of the released text
    alone, so a stop on it is public (docs/sanitize.md, "Loops")."""
    end = text.rfind("\n")
    if end < 0:
        return None
    lines = text[:end].rstrip()  # the complete lines, without the blank ones at their end
    start = lines.rfind("\n") + 1
    line = lines[start:].strip()
    return start if line and line in {earlier.strip() for earlier in lines[:start].split("\n")} else None


class _StopChecker:
    """Host-side stop checks on one document's growing list of token ids."""

    def __init__(self, tokenizer: Any, eos_ids: set[int], stop_strings: Sequence[str],
                 limits: Sequence[int], stop_at_repeated_line: bool = False) -> None:
        self.tokenizer, self.eos_ids, self.stops = tokenizer, eos_ids, tuple(s for s in stop_strings if s)
        self.limits, self.lines = limits, stop_at_repeated_line
        self.tail = 4 * max((len(s) for s in self.stops), default=0) + 2  # tokens that can hold a stop

    def check(self, doc: int, ids: list[int]) -> StopReason | None:
        if ids[-1] in self.eos_ids:
            return "eos"
        if self.stops:
            tail = self.tokenizer.decode(ids[-self.tail:], skip_special_tokens=False)
            if any(s in tail for s in self.stops):
                return "stop_string"
        if self.lines and "\n" in self.tokenizer.decode(ids[-1:], skip_special_tokens=False) \
                and repeated_line(self.tokenizer.decode(ids, skip_special_tokens=False)) is not None:
            return "repeated_line"
        return "max_new_tokens" if len(ids) >= self.limits[doc] else None

    def text(self, ids: list[int], reason: StopReason | None) -> tuple[str, list[int]]:
        """The text of ``ids`` without the EOS token, cut before the first stop string or
        before the line that repeated an earlier one."""
        if reason == "eos":
            ids = ids[:-1]
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        if reason == "stop_string":
            text = text[:min(text.find(s) for s in self.stops if s in text)]
        if reason == "repeated_line":
            text = text[:repeated_line(text)].rstrip()
        for special in self.tokenizer.all_special_tokens:
            text = text.replace(special, "")
        return text, ids


def generate(backend: HFBackend, sequences: Sequence[RowSequence], step: StepFn, *,
             max_new_tokens: int | Sequence[int], generator: Generators, temperature: float = 1.0,
             eos_ids: Sequence[int] | None = None, stop_strings: Sequence[str] = (),
             charge: Callable[[list[int]], None] | None = None,
             on_token: Callable[[int, int], None] | None = None,
             logits_processor: PublicLogitsProcessor | None = None,
             drafter: Drafter | None = None, stop_at_repeated_line: bool = False,
             on_finish: Callable[[int, Generated], None] | None = None) -> list[Generated]:
    """Generate up to ``max_new_tokens`` tokens (one int, or one per sequence) for every
    sequence; see the module docstring.

    ``generator``: one stream for every document, or one per sequence (:func:`make_generators`).
    ``temperature`` is passed to ``step``; 0 means greedy (the argmax of the mechanism's
    distribution, computed at temperature 1): only for comparisons without privacy.
    ``charge(docs)`` is called once per released token of the documents ``docs``, before it is
    sampled. ``on_token(doc, token_id)`` streams every sampled token; raising
    :class:`StopDocument` there ends that document after this token.
    ``logits_processor`` (repetition penalty, no-repeat n-grams, minimum length) adjusts every
    row's logits before the mechanism, from the tokens released so far only, the same for all
    rows of a document, so the guarantee is unchanged (docs/privacy.md, "Common ground").
    ``drafter`` (:class:`tokendp.drafts.PromptLookup`) turns on speculative decoding
    (:meth:`_Loop.verify`): each pass also runs the tokens it guesses from the public row and
    the released tokens, and the output has exactly the distribution it has without
    (docs/privacy.md, "Speculative decoding"); ignored when the backend cannot roll back.
    ``stop_at_repeated_line``: a sequence also ends as soon as a line it released repeats an
    earlier line of its own (:func:`repeated_line`; stop reason ``"repeated_line"``, the text cut
    before that line): a loop's sign, decided from the released tokens alone, so public.
    ``on_finish(doc, output)`` is called once per sequence as soon as it finishes, before the
    others go on (a corpus run saves it there: an interrupt then loses only unfinished ones).
    """
    limits = [max_new_tokens] * len(sequences) if isinstance(max_new_tokens, int) else list(max_new_tokens)
    if len(limits) != len(sequences) or not all(isinstance(t, int) and t >= 1 for t in limits):
        raise InvalidParameterError(
            f"max_new_tokens must be an integer >= 1 (or one per sequence), got {max_new_tokens!r}")
    if not (temperature >= 0):
        raise InvalidParameterError(f"temperature must be >= 0, got {temperature!r}")
    if not isinstance(generator, torch.Generator) and len(generator) != len(sequences):
        raise InvalidParameterError(f"got {len(generator)} generators for {len(sequences)} sequences; give one per sequence")
    eos = set(eos_ids if eos_ids is not None else [backend.tokenizer.eos_token_id]) - {None}
    checker = _StopChecker(backend.tokenizer, eos, stop_strings, limits, stop_at_repeated_line)
    loop = _Loop(sequences, step, generator, temperature, checker, charge, on_token, logits_processor)
    drafts = None if drafter is None or not backend.can_roll_back else \
        [drafter.for_document(seq.rows[0].ids) for seq in sequences]
    state, flat = backend.prefill(sequences)
    pending, guesses = flat[:, None], [[] for _ in sequences]  # (Rtot, 1, V): logits to verify
    while True:
        released, last = loop.verify(state, pending, guesses)
        if pending.shape[1] > 1:  # forget the positions after each document's last released token
            backend.rollback(state, torch.tensor([pending.shape[1] - r for r in released]))
        going = [i in loop.active for i in loop.running]
        if on_finish is not None:
            for i in (i for i, g in zip(loop.running, going) if not g):
                on_finish(i, loop.result(i))
        if not all(going):
            state = backend.keep(state, torch.tensor(going))
            last = [t for t, g in zip(last, going) if g]
            loop.running = [i for i, g in zip(loop.running, going) if g]
        if not loop.running:
            break
        guesses = [[] if drafts is None else drafts[i].propose(loop.outputs[i], limits[i] - len(loop.outputs[i]) - 1)
                   for i in loop.running]
        width = max(len(g) for g in guesses)
        tokens = torch.tensor([[t, *g, *[t] * (width - len(g))] for t, g in zip(last, guesses)])  # (Na, 1 + K)
        pending = backend.extend(state, tokens)  # (Rtot, 1 + K, V)
    return loop.results()


@dataclass(frozen=True)
class Pending:
    """A document waiting for a slot of :func:`generate_continuous`: its rows, T, its own random
    stream, and the caller's key for it (returned with its output)."""

    sequence: RowSequence
    max_new_tokens: int
    generator: torch.Generator
    key: Any = None


def generate_continuous(backend: HFBackend, documents: Iterable[Pending], step: StepFn, *, slots: int,
                        admit: Callable[[int, Pending], None] | None = None, temperature: float = 1.0,
                        eos_ids: Sequence[int] | None = None, stop_strings: Sequence[str] = (),
                        charge: Callable[[list[int]], None] | None = None,
                        on_token: Callable[[Any, int], None] | None = None,
                        logits_processor: PublicLogitsProcessor | None = None,
                        stop_at_repeated_line: bool = False) -> Iterator[tuple[Any, Generated]]:
    """Continuous batching: decode ``documents`` (an iterable, read as slots free up) with at most
    ``slots`` of them in the batch at once; yield ``(key, output)`` for each as it finishes.

    Whenever a document finishes (EOS, a stop string or its T tokens), its rows leave the batch
    (:meth:`HFBackend.keep`) and the next documents of ``documents`` are prefilled together and
    join it (:meth:`HFBackend.join`) before the next step, so every step decodes
    ``min(slots, documents left)`` documents. Each step is :func:`generate`'s one-token step
    (logits processor, layout, ``step``, ``charge``, one exact draw per document from its own
    ``generator``), so a document's k-th token uses the k-th draw of its own stream whatever its
    slot or batchmates (up to the float32 rounding of batched logits, docs/design.md
    "Determinism"). ``step`` and ``charge`` receive slot indices (``# (Na,)``, in ``[0, slots)``);
    ``admit(slot, document)`` is called when a document takes a slot, before its first step, so
    the caller can seat its parameters and ledger there. ``on_token(key, token_id)`` streams;
    ``stop_at_repeated_line`` as for :func:`generate`.

    The layout is public: which document joins when depends on the order of ``documents`` and on
    when the others finished, that is on their released tokens; each row's padding on the public
    lengths of the rows and those released tokens (docs/privacy.md, "Equal rows, equal logits").
    No speculative decoding: one position per pass.
    """
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        raise InvalidParameterError(f"slots must be an integer >= 1, got {slots!r}")
    if not (temperature >= 0):
        raise InvalidParameterError(f"temperature must be >= 0, got {temperature!r}")
    eos = set(eos_ids if eos_ids is not None else [backend.tokenizer.eos_token_id]) - {None}
    checker = _StopChecker(backend.tokenizer, eos, stop_strings, [1] * slots, stop_at_repeated_line)
    keys: list[Any] = [None] * slots
    stream = None if on_token is None else (lambda slot, tok: on_token(keys[slot], tok))
    loop = _Loop.with_slots(slots, step, temperature, checker, charge, stream, logits_processor)
    source = iter(documents)
    state: DecodeState | None = None
    flat: torch.Tensor | None = None  # (Rtot, V): next-token logits of the running rows
    while True:
        free = [s for s in range(slots) if s not in loop.running]
        joining = list(itertools.islice(source, len(free)))
        for slot, doc in zip(free, joining):
            if not (isinstance(doc.max_new_tokens, int) and doc.max_new_tokens >= 1):
                raise InvalidParameterError(f"max_new_tokens must be an integer >= 1, got {doc.max_new_tokens!r}")
            keys[slot] = doc.key
            loop.admit(slot, doc.sequence, doc.generator, doc.max_new_tokens)
            if admit is not None:
                admit(slot, doc)
        if joining:
            new_state, new_flat = backend.prefill([doc.sequence for doc in joining])
            if state is None:
                state, flat = new_state, new_flat
            else:
                state, flat = backend.join(state, new_state), torch.cat([flat, new_flat])
            loop.running = loop.running + free[:len(joining)]
        if state is None:
            return
        tokens = loop._token(flat, loop.running)
        loop._append(loop.running, tokens)
        going = [s in loop.active for s in loop.running]
        for s, g in zip(loop.running, going):
            if not g:
                yield keys[s], loop.result(s)
        if not any(going):
            state, flat, loop.running = None, None, []
            continue
        if not all(going):
            state = backend.keep(state, torch.tensor(going))
            backend.compact(state)
            tokens = [t for t, g in zip(tokens, going) if g]
            loop.running = [s for s, g in zip(loop.running, going) if g]
        flat = backend.decode(state, torch.tensor(tokens))


class _Loop:
    """The state of one :func:`generate` call: the released tokens, the documents still running,
    the per-document diagnostics sums, and one verification round."""

    def __init__(self, sequences: Sequence[RowSequence], step: StepFn, generator: Generators,
                 temperature: float, checker: _StopChecker, charge: Callable[[list[int]], None] | None,
                 on_token: Callable[[int, int], None] | None, processor: PublicLogitsProcessor | None) -> None:
        self.step, self.generator, self.temperature = step, generator, temperature
        self.checker, self.charge, self.on_token, self.processor = checker, charge, on_token, processor
        self.rows = [len(seq) for seq in sequences]
        self.twins = [public_twins(seq) for seq in sequences]
        self.outputs: list[list[int]] = [[] for _ in sequences]
        self.reasons: list[StopReason | None] = [None] * len(sequences)
        self.running = list(range(len(sequences)))  # the documents in the backend's state, in its order
        self.active = set(self.running)  # the documents not finished (a subset of running during a round)
        self.sums: dict[str, torch.Tensor] = {}
        self._index: tuple[tuple[int, ...], torch.Tensor] | None = None  # the last docs, on the device

    @classmethod
    def with_slots(cls, slots: int, step: StepFn, temperature: float, checker: _StopChecker,
                   charge: Callable[[list[int]], None] | None, on_token: Callable[[int, int], None] | None,
                   processor: PublicLogitsProcessor | None) -> _Loop:
        """An empty loop of ``slots`` places, which :meth:`admit` seats documents in (continuous
        batching); nothing runs until then."""
        loop = cls([], step, [None] * slots, temperature, checker, charge, on_token, processor)
        loop.rows, loop.twins = [0] * slots, [()] * slots
        loop.outputs, loop.reasons = [[] for _ in range(slots)], [None] * slots
        return loop

    def verify(self, state: DecodeState, pending: torch.Tensor, guesses: Sequence[Sequence[int]]
               ) -> tuple[list[int], list[int]]:
        """Release tokens from ``pending # (Rtot, P, V)``, the logits of one pass over
        [last released token, guess_1 .. guess_(P-1)] of every running document.

        Position j is the next step of every document whose tokens sampled at positions < j all
        equalled its guesses (at j = 0, every running document): the step, charge and exact
        sample of the one-token loop, from logits whose prefix is exactly the released one. A
        document stops verifying at its first sampled token that differs from its guess (that
        token is released: the residual draw), when its guesses run out, or when it finishes.
        Returns, per running document, the tokens released and the last of them.
        """
        released = [0] * len(self.running)
        last = [0] * len(self.running)
        verifying = list(range(len(self.running)))  # local indices into self.running
        starts = [0, *itertools.accumulate(self.rows[i] for i in self.running)]
        for j in range(pending.shape[1]):
            docs = [self.running[k] for k in verifying]
            if len(verifying) == len(self.running):
                flat = pending[:, j]  # (Rtot, V): a view
            else:
                index = torch.tensor([r for k in verifying for r in range(starts[k], starts[k + 1])])
                flat = pending[index.to(pending.device), j]  # (Rv, V)
            tokens = self._token(flat, docs)
            for k, tok in zip(verifying, tokens):
                released[k], last[k] = released[k] + 1, tok
            self._append(docs, tokens)
            verifying = [k for k, tok in zip(verifying, tokens)
                         if self.running[k] in self.active and j < len(guesses[k]) and tok == guesses[k][j]]
            if not verifying:
                break
        return released, last

    def _token(self, flat: torch.Tensor, docs: list[int]) -> list[int]:
        """One step of the one-token loop for ``docs``: logits ``# (Rv, V)`` of their rows (each
        document's together, in order) -> processor, layout, mechanism, charge, one exact draw
        per document (on the host)."""
        if self.processor is not None:  # public: the released ids only, every row alike
            flat = apply_to_rows(self.processor, flat, [self.rows[d] for d in docs], [self.outputs[d] for d in docs])
        logits = _layout(flat, [self.rows[d] for d in docs], [self.twins[d] for d in docs])
        index = self._docs_index(docs, flat.device)
        out = self.step(logits, index, self.temperature if self.temperature > 0 else 1.0)
        _accumulate(self.sums, out.diagnostics, index, len(self.outputs))
        if self.charge is not None:
            self.charge(list(docs))
        streams = self.generator if isinstance(self.generator, torch.Generator) else [self.generator[d] for d in docs]
        return sample_ids(out.logprobs, streams, greedy=self.temperature == 0)  # (Nv,): the step's one host read

    def _docs_index(self, docs: list[int], device: torch.device) -> torch.Tensor:
        """``docs`` as an int64 tensor on ``device``, copied once while the set of documents stays."""
        key = tuple(docs)
        if self._index is None or self._index[0] != key or self._index[1].device != device:
            self._index = (key, torch.tensor(docs, device=device))
        return self._index[1]

    def _append(self, docs: list[int], tokens: list[int]) -> None:
        """Append each document's token, stream it, and retire the documents that stopped."""
        for doc, tok in zip(docs, tokens):
            self.outputs[doc].append(tok)
            if self.on_token is not None:
                try:
                    self.on_token(doc, tok)
                except StopDocument:
                    self.reasons[doc] = "cancelled"
                    self.active.discard(doc)
                    continue
            self.reasons[doc] = self.checker.check(doc, self.outputs[doc])
            if self.reasons[doc] is not None:
                self.active.discard(doc)

    def results(self) -> list[Generated]:
        return [self.result(i) for i in range(len(self.outputs))]

    def result(self, i: int) -> Generated:
        """Document (or slot) i's output, with its per-step mean diagnostics."""
        reason, steps = self.reasons[i], float(max(len(self.outputs[i]), 1))
        text, ids = self.checker.text(self.outputs[i], reason)
        diag = {k: (v[i] / steps).cpu() for k, v in self.sums.items()}
        return Generated(text, tuple(ids), reason or "max_new_tokens", diag)

    def admit(self, slot: int, sequence: RowSequence, generator: torch.Generator, limit: int) -> None:
        """Seat a new document in ``slot`` (continuous batching): its rows, stream and T; no
        tokens, no diagnostics yet."""
        assert isinstance(self.generator, list) and isinstance(self.checker.limits, list)
        self.rows[slot], self.twins[slot], self.generator[slot] = len(sequence), public_twins(sequence), generator
        self.checker.limits[slot] = limit
        self.outputs[slot], self.reasons[slot] = [], None
        self.active.add(slot)
        for value in self.sums.values():
            value[slot] = 0


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
    return flat[_gather_index(tuple(rows_per_sequence), tuple(twins), flat.device)]


@functools.lru_cache(maxsize=16)
def _gather_index(rows_per_sequence: tuple[int, ...], twins: tuple[tuple[int, ...], ...], device: torch.device) -> torch.Tensor:
    """Flat row index of (sequence, row) ``# (N, R)``; padding rows and twins of the public row
    point at it. Cached: the same layout is copied to the device once, not at every step (the
    result is only read)."""
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
        if value.dim() == 2 and value.shape[1] > sums[key].shape[1]:  # a document with more groups joined
            sums[key] = torch.nn.functional.pad(sums[key], (0, value.shape[1] - sums[key].shape[1]))
        if value.dim() == 2 and value.shape[1] < sums[key].shape[1]:
            # Per-row diagnostics narrow when the documents with the most rows have finished:
            # the rows the remaining documents lack are padding, which contributes 0.
            value = torch.nn.functional.pad(value, (0, sums[key].shape[1] - value.shape[1]))
        sums[key].index_add_(0, docs.to(value.device), value)
