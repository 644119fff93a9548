"""DP synthetic text: InvisibleInk (Vinod, Pillutla, Thakurta, NeurIPS 2025) and the Amin et
al. 2024 baseline.

``tokendp.synthesize(references, epsilon=..., delta=..., references_per_text=B,
max_new_tokens=T)`` writes new texts that resemble a private corpus. The guarantee is per
reference: every synthetic text and everything reported with it is (epsilon, delta)-DP with
respect to replacing any one reference by nothing (replace-by-null adjacency).

How one synthetic text is made. The references are split, in order, into *disjoint* batches of
B; batch j (references jB .. jB+B-1) drives one sequence of 1 + B rows through the decoding
loop of :mod:`tokendp.generation`: row 0 is the public prompt, which shows no reference (for an
instruction model: "write an example of <domain>"), row i the private prompt around reference i
("here is an example of <domain>: <reference i>; write another";
:mod:`tokendp.text.prompt_pair`). At each of at most T steps
the mechanism turns the 1 + B next-token logit vectors into one distribution:

* InvisibleInk: DClip, phi = phi_pub + (1/B) sum_i clip(phi_i - phi_pub, -C, C), restricted to
  the Top-k+ set computed from the public logits alone, sampled as the exponential mechanism
  softmax(phi / tau). Per token rho_tok = C^2 / (2 B^2 tau^2)-zCDP per reference.
* Amin et al.: each reference's full logits clipped to [-C, C] and averaged; per token
  rho_tok = 2 C^2 / (B^2 tau^2) (:func:`tokendp.accounting.amin_rho_per_token`). With the
  sparse-vector switch (``svt_epsilon``), one SVT run per text sends each step to the
  references' average (charged rho_tok) or to the public model (free), at most c =
  ``max_private_tokens`` times to the references; the text then continues from the public model.

Composition. T tokens compose to rho = T rho_tok (zCDP adds up, Bun and Steinke 2016, Lemma
2.3), converted exactly to (epsilon, delta) (:func:`tokendp.accounting.zcdp_to_epsilon`); T is
fixed before generation and counted in full even when a text stops early, since the stopping
time depends on the references. Across batches the guarantee does not add up: each reference
sits in exactly one batch, and the texts of the other batches do not read it (parallel
composition), so the whole set of synthetic texts is (epsilon, delta)-DP per reference. The
partition is fixed by position, before anything is read, so it leaks nothing. A reference is
never used twice: ``num`` texts need ``num * B`` references, and asking for more texts than
floor(N / B) is an error. With the switch, a text's certificate is instead
:func:`tokendp.accounting.amin_switch_epsilon`: its SVT run (svt_epsilon-DP) and at most c private
tokens, whatever T (docs/privacy.md).

Randomness. Text j samples from its own stream, seeded with ``document_seed(seed, j)`` (or from the
OS without a seed), which also draws its sparse-vector noise: a text depends on (seed, j) and its
batch only, not on the batches generated with it, so the corpus engines
(:mod:`tokendp.engines`), which hand whole batches to any worker, give the texts this function gives.

Calibration. Given (epsilon, delta, T, B, tau), the clip C is the largest value meeting epsilon
(:func:`tokendp.accounting.invisibleink_clip`; for Amin et al. the same zCDP budget with its own
rho_tok; with the switch :func:`tokendp.accounting.amin_switch_clip`). epsilon = 0 gives C = 0:
InvisibleInk then samples the public model's Top-k (the references are never read by the
distribution) and Amin et al. would sample uniformly, so at epsilon 0 both methods sample the
public model's distribution and charge nothing (the switch, which spends svt_epsilon, is refused).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from tokendp.accounting import (
    Ledger,
    ZcdpEvent,
    amin_clip,
    amin_epsilon,
    amin_rho_per_token,
    amin_switch_clip,
    amin_switch_epsilon,
    amin_switch_sensitivity,
    compose_zcdp,
    invisibleink_clip,
    invisibleink_epsilon,
    invisibleink_rho_per_token,
)
from tokendp.backends import HFBackend, RowSequence, is_model_object, load_backend, model_label
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.generation import Generated, document_seed, generate, make_generators
from tokendp.params import check_temperature
from tokendp.jobs._renamed import renamed_keywords, with_cli_keys
from tokendp.mechanisms import AminEtAl, InvisibleInk, SparseVectorSwitch
from tokendp.mechanisms.base import MechanismStep
from tokendp.text.prompt_pair import PromptPair, synthesis_prompts

Method = Literal["invisibleink", "amin"]
METHODS = ("invisibleink", "amin")
MAX_REFERENCE_TOKENS = 256  # tokens of a reference its row reads; the rest is cut
DEFAULT_MODEL = "smollm2"  # an instruction model: the prompt pair asks it for a new text of the kind shown


@dataclass(frozen=True)
class SyntheticText:
    """One synthetic text and its certificate (public parameters and public-row diagnostics only).

    ``epsilon`` is certified per reference at ``delta`` for all ``max_tokens`` possible tokens,
    converted from ``rho`` = T rho_tok, its zCDP per reference (None with the switch, whose
    certificate is an RDP curve); ``references`` are the keys of the B references its batch read
    (indices into the input list, or a corpus's reference ids).
    ``topk_plus_mean`` is the mean size of InvisibleInk's Top-k+ candidate set; it is computed
    from the public row only (the prompt and the already released tokens), so publishing it
    costs no privacy.

    With Amin et al.'s sparse-vector switch (else None): ``svt_epsilon``, ``max_private_tokens``
    (c) and ``switch_threshold`` are its public parameters, part of the certificate;
    ``private_tokens`` is a diagnostic, the realised number of tokens sampled from the
    references (<= c). It is a function of the SVT's answers, which the guarantee covers, but it
    depends on the data and is never the guarantee.
    """

    text: str
    method: str
    epsilon: float
    delta: float
    clip: float
    rho: float | None
    batch_size: int
    max_tokens: int
    temperature: float
    top_k: int | None
    tokens_generated: int
    stop_reason: str
    references: tuple[str | int, ...]
    topk_plus_mean: float | None
    model: str
    svt_epsilon: float | None = None
    max_private_tokens: int | None = None
    switch_threshold: float | None = None
    private_tokens: int | None = None
    max_reference_tokens: int = MAX_REFERENCE_TOKENS

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON: B and T under the CLI's names ``references_per_text`` and
        ``max_new_tokens`` (``batch_size`` and ``max_tokens`` kept one release, deprecated)."""
        out = asdict(self)
        out["references"] = list(self.references)
        return with_cli_keys(out)


# ---------------------------------------------------------------------------- parameters
def _check_params(method: str, epsilon: float, delta: float, batch_size: int, max_tokens: int,
                  temperature: float, top_k: int | None) -> None:
    if method not in METHODS:
        raise InvalidParameterError(f"method must be one of {METHODS}, got {method!r}")
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon >= 0):
        raise InvalidParameterError(f"epsilon (per reference) must be a finite number >= 0, got {epsilon!r}")
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise InvalidParameterError(f"delta must be in (0, 1), e.g. below 1/(number of references); got {delta!r}")
    for name, value in (("batch_size", batch_size), ("max_tokens", max_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidParameterError(f"{name} must be an integer >= 1, got {value!r}")
    check_temperature(temperature, greedy=False)  # the exponential mechanism needs tau > 0
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise InvalidParameterError(f"top_k must be an integer >= 1 (or None for the whole vocabulary), got {top_k!r}")
    if method == "amin" and top_k is not None:
        raise InvalidParameterError("Amin et al. sample from the whole vocabulary; pass top_k=None with method='amin'")


def partition(n_references: int, *, batch_size: int, num: int | None = None) -> list[tuple[int, ...]]:
    """Disjoint batches of reference indices: batch j is (jB, ..., jB + B - 1), j < num.

    With N references there are floor(N / B) disjoint batches; ``num`` (default: all of them)
    may not exceed that, since a reference used by two texts would be charged twice.
    """
    available = n_references // batch_size
    if available == 0:
        raise InvalidInputError(
            f"{n_references} reference(s) cannot fill one batch of {batch_size}; lower batch_size or add references")
    if num is None:
        num = available
    if isinstance(num, bool) or not isinstance(num, int) or num < 1:
        raise InvalidParameterError(f"num must be an integer >= 1, got {num!r}")
    if num > available:
        raise InvalidParameterError(
            f"{n_references} references in disjoint batches of {batch_size} give at most {available} synthetic "
            f"text(s), not {num}: each reference is used once; lower num or batch_size, or add references")
    return [tuple(range(j * batch_size, (j + 1) * batch_size)) for j in range(num)]


@dataclass(frozen=True)
class Switch:
    """Amin et al.'s sparse-vector switch: its pure-DP share ``svt_epsilon`` of the budget, the cap
    c = ``max_private_tokens`` on tokens sampled from the references per text, and the
    ``threshold`` on the statistic in logit units (None: the calibrated clip C)."""

    svt_epsilon: float
    max_private_tokens: int
    threshold: float | None = None


def default_max_private_tokens(max_tokens: int) -> int:
    """c = max(1, T // 4): each private token then gets about four times the zCDP budget of a
    token without the switch (a clip about twice as large), while up to a quarter of the text can
    still follow the references."""
    return max(1, max_tokens // 4)


def switch_params(*, method: str, max_tokens: int, svt_epsilon: float | None, max_private_tokens: int | None,
                  switch_threshold: float | None) -> Switch | None:
    """Validate the switch options (None when the switch is off); c defaults to
    :func:`default_max_private_tokens`."""
    if svt_epsilon is None:
        if max_private_tokens is not None or switch_threshold is not None:
            raise InvalidParameterError(
                "max_private_tokens and switch_threshold configure the sparse-vector switch; pass svt_epsilon to turn it on")
        return None
    if method != "amin":
        raise InvalidParameterError(
            f"the sparse-vector switch belongs to method 'amin' (Amin et al.), not {method!r}; drop svt_epsilon, "
            "max_private_tokens and switch_threshold, or use method 'amin'")
    if not (isinstance(svt_epsilon, (int, float)) and not isinstance(svt_epsilon, bool) and math.isfinite(svt_epsilon)
            and svt_epsilon > 0):
        raise InvalidParameterError(f"svt_epsilon (the switch's share of epsilon) must be a finite number > 0, got {svt_epsilon!r}")
    c = default_max_private_tokens(max_tokens) if max_private_tokens is None else max_private_tokens
    if isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= max_tokens:
        raise InvalidParameterError(
            f"max_private_tokens must be an integer from 1 to max_tokens ({max_tokens}), got {c!r}")
    if switch_threshold is not None and not (
            isinstance(switch_threshold, (int, float)) and not isinstance(switch_threshold, bool)
            and math.isfinite(switch_threshold) and switch_threshold >= 0):
        raise InvalidParameterError(
            f"switch_threshold must be a finite number >= 0 in logit units (the statistic lies in [0, 2C]), got {switch_threshold!r}")
    return Switch(float(svt_epsilon), c, None if switch_threshold is None else float(switch_threshold))


def calibrate_clip(*, method: Method, epsilon: float, delta: float, batch_size: int, temperature: float,
                   max_tokens: int, switch: Switch | None = None) -> float:
    """The largest clip C whose guarantee is (epsilon, delta) per reference; 0 at epsilon 0.

    InvisibleInk: :func:`tokendp.accounting.invisibleink_clip`, C = B tau sqrt(2 rho* / T) with
    rho* the largest zCDP meeting epsilon. Amin et al.: :func:`tokendp.accounting.amin_clip`, half
    of it (their rho_tok is InvisibleInk's at twice the clip). With the switch:
    :func:`tokendp.accounting.amin_switch_clip`, for svt_epsilon plus c private tokens.
    """
    if switch is not None:
        if epsilon == 0:
            raise InvalidParameterError("the sparse-vector switch spends svt_epsilon > 0, so it cannot run at epsilon 0; "
                                        "drop svt_epsilon for public-model text")
        return amin_switch_clip(epsilon=epsilon, delta=delta, batch_size=batch_size, temperature=temperature,
                                max_private_tokens=switch.max_private_tokens, svt_epsilon=switch.svt_epsilon)
    if epsilon == 0:
        return 0.0
    fn = invisibleink_clip if method == "invisibleink" else amin_clip
    return fn(epsilon=epsilon, delta=delta, batch_size=batch_size, temperature=temperature, max_tokens=max_tokens)


def certified_epsilon(*, method: Method, clip: float, delta: float, batch_size: int, temperature: float,
                      max_tokens: int, switch: Switch | None = None) -> float:
    """Epsilon per reference at clip C: T tokens, or with the switch, its run plus c private tokens
    (:func:`tokendp.accounting.amin_switch_epsilon`); 0 when C = 0 without the switch."""
    if switch is not None:
        return amin_switch_epsilon(clip=clip, batch_size=batch_size, temperature=temperature,
                                   max_private_tokens=switch.max_private_tokens, svt_epsilon=switch.svt_epsilon,
                                   delta=delta)
    if clip == 0:
        return 0.0
    fn = invisibleink_epsilon if method == "invisibleink" else amin_epsilon
    return fn(clip=clip, batch_size=batch_size, temperature=temperature, max_tokens=max_tokens, delta=delta)


def rho_per_token(*, method: Method, clip: float, batch_size: int, temperature: float) -> float:
    """zCDP charged to each reference of a batch per generated token."""
    fn = invisibleink_rho_per_token if method == "invisibleink" else amin_rho_per_token
    return fn(clip=clip, batch_size=batch_size, temperature=temperature)


# ---------------------------------------------------------------------------- model and rows
def _token_ids(tokenizer: Any, text: str) -> tuple[int, ...]:
    return tuple(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else ()


def batch_rows(references: Sequence[str], batch: Sequence[int], tokenizer: Any, prompts: PromptPair, *,
               max_reference_tokens: int = MAX_REFERENCE_TOKENS) -> RowSequence:
    """The 1 + B rows of one batch: the public prompt (no reference), then the private template
    around each reference of the batch, cut to ``max_reference_tokens``. Every row is laid out
    as long as a private row can be, so that no reference's length changes how the others' rows
    (and the public row) are computed (docs/privacy.md, "Equal rows, equal logits"). The cut is
    silent: saying that a reference was cut would tell whether it is longer than the cap, which
    the guarantee does not cover; the cap is public and reported with every text."""
    ids = [_token_ids(tokenizer, references[i]) for i in batch]
    rows = [prompts.public, *(prompts.private.wrap(r[:max_reference_tokens]) for r in ids)]
    return RowSequence.from_ids(rows, public_prefix=prompts.public_prefix,
                                public_length=layout_length(prompts, max_reference_tokens))


def layout_length(prompts: PromptPair, max_reference_tokens: int) -> int:
    """The length every row of a batch is laid out in: the longest a private row can be (public)."""
    return max(len(prompts.public), len(prompts.private.wrap(())) + max_reference_tokens)


# ---------------------------------------------------------------------------- the job
def _check_references(references: Sequence[str]) -> list[str]:
    if isinstance(references, str):
        raise InvalidInputError("references must be a list of texts, not one string")
    refs = list(references)
    for i, ref in enumerate(refs):
        if not isinstance(ref, str) or not ref.strip():
            raise InvalidInputError(f"reference {i} is empty or not a string; every reference must be a non-empty text")
    return refs


@dataclass(frozen=True)
class ReferenceBatch:
    """The B references one synthetic text reads.

    ``id`` is the text's index j in the partition: it names the text and keys its random stream
    (``document_seed(seed, j)``). ``references`` are the references' keys as reported (indices
    into the input list, or a corpus's reference ids), ``texts`` the references themselves.
    """

    id: int
    references: tuple[str | int, ...]
    texts: tuple[str, ...]


class _Job:
    """The mechanism bound to its parameters, a ledger with one unit per batch, and the step, for
    the texts of one call; text d samples, and draws its sparse-vector noise, from ``generators[d]``.

    With the switch, one SVT run per text is drawn here (its threshold noise, once, from the text's
    own stream), and each batch's worst case -- the SVT run and c private tokens -- is charged to
    the ledger before the first token; the switch's cap then guarantees that no text spends more,
    so the per-step charge has nothing left to do (and needs no host copy of the SVT's answers).
    """

    def __init__(self, method: Method, clip: float, batch_size: int, temperature: float, top_k: int | None,
                 epsilon: float, delta: float, switch: Switch | None, generators: Sequence[torch.Generator]) -> None:
        n_batches = len(generators)
        self.public_only = method == "amin" and clip == 0  # clipping to [0, 0] would sample uniformly
        self.temperature = float(temperature)
        self.generators = list(generators)
        self.switch: SparseVectorSwitch | None = None
        self.mechanism: Any = None
        if method == "invisibleink":
            self.mechanism = InvisibleInk(clip=clip, temperature=temperature, top_k=top_k)
        elif switch is not None:
            self.switch = SparseVectorSwitch(
                threshold=clip if switch.threshold is None else switch.threshold,
                sensitivity=amin_switch_sensitivity(clip=clip, batch_size=batch_size), epsilon=switch.svt_epsilon,
                max_positives=switch.max_private_tokens, num_texts=n_batches, generator=self.generators)
            self.mechanism = AminEtAl(clip=clip, temperature=temperature, switch=self.switch)
        elif not self.public_only:
            self.mechanism = AminEtAl(clip=clip, temperature=temperature)
        self.event = ZcdpEvent(rho_per_token(method=method, clip=clip, batch_size=batch_size,
                                             temperature=temperature))
        # Every reference of a batch is charged the same event at the same steps, so one ledger
        # unit per batch holds exactly each of its references' spending.
        self.ledger = Ledger({j: epsilon for j in range(n_batches)}, delta=delta)
        if self.switch is not None:
            for events in self.mechanism.events_per_text(batch_size=batch_size):
                self.ledger.charge({j: events["reference"] for j in range(n_batches)})
        self.offset = 0  # index of the first batch of the chunk being generated

    def step(self, logits: torch.Tensor, docs: torch.Tensor, temperature: float) -> MechanismStep:
        """logits ``# (Na, 1+B, V)`` of the active sequences ``docs # (Na,)`` -> their next-token log-probs."""
        if self.public_only:  # the references are not read
            return MechanismStep(torch.log_softmax(logits[:, 0].float() / self.temperature, -1), {})  # (Na, V)
        if self.switch is not None:
            runs = docs + self.offset  # (Na,)
            return self.mechanism.step(logits, docs=runs, generator=[self.generators[r] for r in runs.tolist()])
        return self.mechanism.step(logits)

    def charge(self, docs: list[int]) -> None:
        """Charge every reference of each active batch for one token, before it is sampled
        (with the switch: already charged in full at construction)."""
        if self.switch is None:
            self.ledger.charge({self.offset + d: self.event for d in docs})

    def private_tokens(self) -> list[int | None]:
        """Per text, the realised number of private tokens (a diagnostic), or None without the switch."""
        if self.switch is None:
            return [None] * len(self.ledger.budgets)
        return self.switch.positives.tolist()


class Synthesizer:
    """A synthesis: its parameters checked and its clip calibrated once, its model loaded on first
    use; calling it on reference batches (:class:`ReferenceBatch`) writes their texts.

    The certificate (``clip``, ``epsilon``, ``rho``) is a function of the public parameters only,
    the same for every batch of every call. Text j samples from its own stream, seeded with
    ``document_seed(seed, j)`` (or from the OS): its output depends on (seed, j) and its batch
    only, not on the batches of the same call, their order or the process (up to the float32
    rounding of batched logits, docs/design.md "Determinism").

    Args:
        epsilon, delta: the guarantee per reference (epsilon 0: public-model text).
        batch_size: B, references averaged per synthetic text.
        max_tokens: T, tokens per text, fixed before generation and all counted.
        temperature: tau (> 0) of the exponential mechanism.
        top_k: k of InvisibleInk's Top-k+ set (None: the whole vocabulary). Amin et al. always
            sample from the whole vocabulary: for them the default 100 means None, and any other
            k is an error.
        method: ``"invisibleink"`` or ``"amin"`` (Amin et al. 2024, full-logit clipping).
        model: a name (``"smollm2"``, ``"rewriter"``, ``"tiny"``), a local model directory, a hub id in the
            local cache, an ``HFBackend``, None for :data:`DEFAULT_MODEL` (SmolLM2-135M-Instruct), or a
            transformers causal LM or peft ``PeftModel`` object, on any device and in any dtype, used in
            place (:meth:`tokendp.backends.HFBackend.from_model`).
        tokenizer: the model object's tokenizer (only with a model object).
        prompt: a plain template with ``{document}`` for every row (the public row gets it around
            ``public_document``); default: the model's ``tokendp.json`` template, else the
            instruction pair for ``domain`` (:func:`tokendp.text.prompt_pair.synthesis_prompts`:
            the private rows show one reference each, the public row the request alone).
        domain: what kind of text the references are, a noun phrase with its article (e.g. "a
            hospital discharge note"); fills the instruction pair, and is required with it.
        public_document: with a template, what the public row shows instead of a reference (default: the model's
            ``tokendp.json`` placeholder, else nothing).
        max_reference_tokens: the tokens of a reference its row reads (default 256; the rest is
            cut, silently); every row is laid out this long, so that a reference's length cannot change
            how the public row and the other references' rows are computed.
        concurrency: synthetic texts generated together (each 1 + B rows) in one batch.
        stop: extra stop strings (the model's tokendp.json "stop" always apply).
        device, dtype: where and how to run the model.
        svt_epsilon: turns on Amin et al.'s sparse-vector switch to the public model (method
            "amin" only) and is its pure-DP share of ``epsilon``; the clip is calibrated so that
            the switch and at most c private tokens per text meet ``epsilon``
            (:func:`tokendp.accounting.amin_switch_epsilon`).
        max_private_tokens: c, the most tokens per text sampled from the references (1 <= c <= T;
            default max(1, T // 4)); after c, the text continues from the public model.
        switch_threshold: the switch's threshold on the statistic (logit units; default the clip C,
            the middle of the statistic's range [0, 2C]).
    """

    def __init__(self, *, epsilon: float, delta: float, batch_size: int, max_tokens: int, temperature: float = 1.0,
                 top_k: int | None = 100, method: Method = "invisibleink",
                 model: str | Path | HFBackend | Any | None = None, tokenizer: Any = None, prompt: str | None = None,
                 domain: str | None = None,
                 public_document: str | None = None, max_reference_tokens: int = MAX_REFERENCE_TOKENS,
                 concurrency: int = 16, stop: Sequence[str] = (),
                 device: str | None = None, dtype: str | None = None, svt_epsilon: float | None = None,
                 max_private_tokens: int | None = None, switch_threshold: float | None = None) -> None:
        if method == "amin" and top_k == 100:
            top_k = None  # the default k belongs to InvisibleInk; Amin et al. use the whole vocabulary
        _check_params(method, epsilon, delta, batch_size, max_tokens, temperature, top_k)
        self.switch = switch_params(method=method, max_tokens=max_tokens, svt_epsilon=svt_epsilon,
                                    max_private_tokens=max_private_tokens, switch_threshold=switch_threshold)
        for name, value in (("concurrency", concurrency), ("max_reference_tokens", max_reference_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidParameterError(f"{name} must be an integer >= 1, got {value!r}")
        self.max_reference_tokens = max_reference_tokens
        self.method, self.epsilon, self.delta, self.batch_size = method, epsilon, float(delta), batch_size
        self.max_tokens, self.temperature, self.top_k = max_tokens, float(temperature), top_k
        self.concurrency, self.stop = concurrency, list(stop)
        public = dict(method=method, delta=delta, batch_size=batch_size, temperature=temperature,
                      max_tokens=max_tokens, switch=self.switch)
        self.clip = calibrate_clip(epsilon=epsilon, **public)
        self.certified = certified_epsilon(clip=self.clip, **public)
        self.rho = None if self.switch is not None else compose_zcdp(
            [rho_per_token(method=method, clip=self.clip, batch_size=batch_size, temperature=temperature)], [max_tokens])
        if tokenizer is not None and not is_model_object(model):
            raise InvalidParameterError("tokenizer= goes with a model object; a model given by name, directory or "
                                        "HFBackend brings its own tokenizer")
        self._model = (DEFAULT_MODEL if model is None else model, device, dtype)
        self._tokenizer = tokenizer
        self._prompt = dict(template=prompt, domain=domain, public_document=public_document)

    def settings(self) -> dict[str, Any]:
        """Every parameter that can change a text or its certificate, defaults resolved (not the
        device or the concurrency, which only decide where and how many at a time)."""
        model, _, dtype = self._model
        sw = self.switch
        switch = (None, None, None) if sw is None else (sw.svt_epsilon, sw.max_private_tokens, sw.threshold)
        return {"method": self.method, "epsilon": self.epsilon, "delta": self.delta, "batch_size": self.batch_size,
                "max_tokens": self.max_tokens, "temperature": self.temperature, "top_k": self.top_k,
                "max_reference_tokens": self.max_reference_tokens,
                "model": model_label(model), "dtype": dtype,
                "stop": list(self.stop), **dict(zip(("svt_epsilon", "max_private_tokens", "switch_threshold"), switch)),
                **self._prompt}

    @functools.cached_property
    def backend(self) -> HFBackend:
        model, device, dtype = self._model
        return load_backend(model, tokenizer=self._tokenizer, device=device, dtype=dtype)

    @functools.cached_property
    def prompts(self) -> PromptPair:
        return synthesis_prompts(self.backend.tokenizer, options=self.backend.options, **self._prompt)

    def check_fits(self) -> None:
        """Refuse a layout (prompts and ``max_reference_tokens``, all public) that leaves the
        model no room for T tokens, before any reference is read."""
        self.backend.check_fits(layout_length(self.prompts, self.max_reference_tokens), self.max_tokens)

    def __call__(self, batches: Sequence[ReferenceBatch], *, seed: int | None = None,
                 on_token: Callable[[int, int], None] | None = None,
                 on_text: Callable[[int, SyntheticText], None] | None = None) -> list[SyntheticText]:
        """The texts of ``batches``, in their order, ``concurrency`` at a time; ``on_token(position
        in batches, token id)`` streams every sampled token; ``on_text(position, text)`` gets each
        text as soon as it is done (the one the list holds), while the others go on."""
        for b in batches:
            if len(b.texts) != self.batch_size:
                raise InvalidInputError(f"batch {b.id} holds {len(b.texts)} references, not batch_size {self.batch_size}")
        if not batches:
            return []
        self.check_fits()
        backend, prompts = self.backend, self.prompts
        sequences = [batch_rows(b.texts, range(len(b.texts)), backend.tokenizer, prompts,
                                max_reference_tokens=self.max_reference_tokens) for b in batches]
        generators = make_generators(None if seed is None else [document_seed(seed, b.id) for b in batches],
                                     len(batches))
        job = _Job(self.method, self.clip, self.batch_size, self.temperature, self.top_k, self.epsilon, self.delta,
                   self.switch, generators)
        outputs: list[Generated] = []
        for start in range(0, len(sequences), self.concurrency):
            job.offset, end = start, start + self.concurrency
            stream = None if on_token is None else (lambda d, t, s=start: on_token(s + d, t))
            done = None if on_text is None else (
                lambda d, out, s=start: on_text(s + d, self._text(out, batches[s + d], job.private_tokens()[s + d])))
            outputs += generate(backend, sequences[start:end], job.step, max_new_tokens=self.max_tokens,
                                generator=generators[start:end], temperature=self.temperature,
                                eos_ids=backend.eos_token_ids, stop_strings=[*backend.options.get("stop", []), *self.stop],
                                charge=job.charge, on_token=stream, on_finish=done)
        return [self._text(out, b, private) for out, b, private in zip(outputs, batches, job.private_tokens())]

    def _text(self, out: Generated, batch: ReferenceBatch, private: int | None) -> SyntheticText:
        switch = self.switch
        return SyntheticText(
            text=out.text, method=self.method, epsilon=self.certified, delta=self.delta, clip=self.clip, rho=self.rho,
            batch_size=self.batch_size, max_tokens=self.max_tokens, temperature=self.temperature, top_k=self.top_k,
            tokens_generated=len(out.token_ids), stop_reason=out.stop_reason, references=tuple(batch.references),
            topk_plus_mean=_topk_plus_mean(out), model=self.backend.name,
            svt_epsilon=None if switch is None else switch.svt_epsilon,
            max_private_tokens=None if switch is None else switch.max_private_tokens,
            switch_threshold=None if switch is None else (self.clip if switch.threshold is None else switch.threshold),
            private_tokens=private, max_reference_tokens=self.max_reference_tokens)


@renamed_keywords(batch_size="references_per_text", max_tokens="max_new_tokens")
def synthesize(
    references: Sequence[str], *, epsilon: float, delta: float, references_per_text: int, max_new_tokens: int,
    num: int | None = None, seed: int | None = None, on_token: Callable[[int, int], None] | None = None,
    temperature: float = 1.0, top_k: int | None = 100, method: Method = "invisibleink",
    model: str | Path | HFBackend | Any | None = None, tokenizer: Any = None, prompt: str | None = None,
    domain: str | None = None, public_document: str | None = None, max_reference_tokens: int = MAX_REFERENCE_TOKENS,
    concurrency: int = 16, stop: Sequence[str] = (), device: str | None = None, dtype: str | None = None,
    svt_epsilon: float | None = None, max_private_tokens: int | None = None, switch_threshold: float | None = None,
) -> list[SyntheticText]:
    """Generate ``num`` synthetic texts, each (epsilon, delta)-DP per reference (module docstring;
    ``tokendp.synthesize``).

    Args:
        references: the private texts; each is read by exactly one synthetic text.
        epsilon, delta: the guarantee per reference (epsilon 0: public-model text).
        references_per_text: B, references averaged per synthetic text (was ``batch_size``,
            still accepted with a FutureWarning).
        max_new_tokens: T, tokens per text, fixed before generation and all counted (was
            ``max_tokens``, likewise).
        num: how many texts (default floor(N / B), the most disjoint batches allow); text j reads
            references jB .. jB + B - 1 (:func:`partition`).
        seed: reproducible sampling (text j samples from ``document_seed(seed, j)``'s stream); None
            seeds every text from the OS.
        on_token: streaming callback ``(text index, token id)``.
        temperature, top_k, method, model, tokenizer, prompt, domain, public_document,
            max_reference_tokens, concurrency, stop, device, dtype, svt_epsilon,
            max_private_tokens, switch_threshold: as for :class:`Synthesizer`.

    Returns:
        One :class:`SyntheticText` per batch, in batch order.
    """
    synthesizer = Synthesizer(
        epsilon=epsilon, delta=delta, batch_size=references_per_text, max_tokens=max_new_tokens, temperature=temperature,
        top_k=top_k, method=method, model=model, tokenizer=tokenizer, prompt=prompt, domain=domain,
        public_document=public_document, max_reference_tokens=max_reference_tokens, concurrency=concurrency,
        stop=stop, device=device, dtype=dtype, svt_epsilon=svt_epsilon, max_private_tokens=max_private_tokens,
        switch_threshold=switch_threshold)
    return synthesizer(reference_batches(references, batch_size=synthesizer.batch_size, num=num), seed=seed,
                       on_token=on_token)


def reference_batches(references: Sequence[str], *, batch_size: int, num: int | None = None) -> list[ReferenceBatch]:
    """The disjoint batches of :func:`partition` with their texts: text j reads batch j."""
    refs = _check_references(references)
    return [ReferenceBatch(j, batch, tuple(refs[i] for i in batch))
            for j, batch in enumerate(partition(len(refs), batch_size=batch_size, num=num))]


def _topk_plus_mean(out: Generated) -> float | None:
    size = out.diagnostics.get("topk_plus_size")
    return None if size is None else float(size.float().mean())
