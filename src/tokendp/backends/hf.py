"""Hugging Face transformers causal LMs as a batched, KV-cached next-token backend.

The backend runs the rows of many sequences in one forward pass and returns only the
logits of the last position of every row (``logits_to_keep=1``: the (rows, length, V)
tensor is never materialised). Rows are left padded; every pass carries an explicit
attention mask and explicit position ids, so a padded row computes exactly what it would
compute alone.

Prefix sharing. The rows of one sequence usually agree on their first tokens (the prompt
template and the document up to its first sensitive span). Prefill runs that shared prefix
once per sequence, then copies its key/value cache along the batch axis to every row of
the sequence (``DynamicCache.batch_select_indices`` with repeated indices) and runs only the
rows' own suffixes on top of it. The cache layout is then
``[pad | prefix of the sequence | pad | suffix of the row]``; the attention mask hides both
pads, and position ids count only real tokens, so the result equals an unshared prefill.

LoRA adapters per row. A row may name a LoRA adapter (PMixED: the public row reads the base
model, row j the adapter of ensemble member j). The backend then holds a ``peft`` model with
every adapter loaded (:meth:`HFBackend.load` with ``adapters=``, or :meth:`HFBackend.add_adapters`)
and runs all rows of all sequences in ONE forward pass per step, passing peft's per-row
``adapter_names`` (a "mixed adapter batch": every LoRA layer applies each adapter to its own
rows; ``"__base__"`` rows get the base layer alone, so the public row is exactly the base
model's). Rows of one sequence share a prefix only when they read it with the same adapter.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import json
import logging
import warnings
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tokendp.backends.rows import RowSequence
from tokendp.errors import InvalidInputError, InvalidParameterError

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
OPTIONS_FILE = "tokendp.json"
BASE_ADAPTER = "__base__"  # peft's name for "no adapter" in a mixed batch
log = logging.getLogger("tokendp")
_WARNED: weakref.WeakSet = weakref.WeakSet()  # model objects whose fallbacks were reported once


# ---------------------------------------------------------------------------- model objects
def is_model_object(model: Any) -> bool:
    """Whether ``model`` is a loaded model (a torch module: transformers, peft) rather than a name."""
    return isinstance(model, torch.nn.Module)


def model_label(model: Any) -> str:
    """How reports name ``model``: an HFBackend's name, a string or path as given, a model
    object's ``name_or_path`` or else its class name. Never a repr (it can run to pages)."""
    if isinstance(model, HFBackend):
        return model.name
    if isinstance(model, (str, Path)):
        return str(model)
    config = getattr(model, "config", None)
    path = getattr(config, "_name_or_path", "") if config is not None else ""
    if isinstance(path, (str, Path)) and str(path):
        return str(path)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return type(base).__name__


def check_model_object(model: Any) -> None:
    """Refuse what is not a causal LM with an LM head; messages name the type only."""
    kind = type(model).__name__
    if not is_model_object(model) or getattr(model, "config", None) is None:
        raise InvalidParameterError(
            f"model must be a name, a model directory, a hub id, an HFBackend, or a transformers/peft model "
            f"object; got an object of type {kind}")
    try:
        head = model.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        head = None
    if head is None or getattr(head, "weight", None) is None:
        raise InvalidParameterError(
            f"the model object ({kind}) has no language-model head: load it with "
            "AutoModelForCausalLM (or wrap such a model with peft)")


def check_tokenizer(tokenizer: Any) -> None:
    """Refuse a tokenizer the jobs cannot use (they call it, ``decode`` and ``convert_tokens_to_ids``)."""
    from transformers import PreTrainedTokenizerBase

    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        raise InvalidParameterError(
            f"tokenizer must be a transformers tokenizer (AutoTokenizer.from_pretrained(...)), got an object "
            f"of type {type(tokenizer).__name__}")


def _input_device(model: Any) -> torch.device:
    """Where input ids go: the input embedding's device (the first device of a model spread over
    several), else the first parameter's."""
    try:
        return model.get_input_embeddings().weight.device
    except (AttributeError, NotImplementedError):
        return next(model.parameters()).device


def _local_folder(model: Any) -> Path | None:
    """The model's ``name_or_path`` when it is a local directory (where tokendp.json may lie)."""
    path = getattr(getattr(model, "config", None), "_name_or_path", "")
    if isinstance(path, (str, Path)) and str(path) and Path(path).is_dir():
        return Path(path)
    return None


def _tokenizer_for(model: Any) -> Any:
    from transformers import AutoTokenizer

    path = getattr(getattr(model, "config", None), "_name_or_path", "")
    if not (isinstance(path, (str, Path)) and str(path)):
        raise InvalidParameterError("a model object needs its tokenizer: pass tokenizer= (the model has no "
                                    "name_or_path to load one from)")
    try:
        return AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError):
        raise InvalidParameterError(f"a model object needs its tokenizer: pass tokenizer= (none is saved at the "
                                    f"model's name_or_path {str(path)!r})") from None


def _first_time(model: Any) -> bool:
    try:
        if model in _WARNED:
            return False
        _WARNED.add(model)
    except TypeError:  # not weak-referenceable: report every time
        pass
    return True


def describe_defaults(backend: HFBackend) -> str:
    """One line on what the jobs use for a model without ``tokendp.json``: public settings only
    (the model's name, the template's kind, the placeholder, the stop tokens), never text."""
    from tokendp.text.contexts import DEFAULT_PLACEHOLDER

    chat = bool(getattr(backend.tokenizer, "chat_template", None))
    eos = [backend.tokenizer.convert_ids_to_tokens(i) for i in backend.eos_token_ids]
    template = ("the tokenizer's chat template" if chat else
                "tokendp's plain templates (the tokenizer has no chat template)")
    return (f"tokendp: model {backend.name!r} has no {OPTIONS_FILE} (prompt template, placeholder, stop strings); "
            f"the jobs prompt it through {template}, use the placeholder {DEFAULT_PLACEHOLDER!r} and stop at the "
            f"EOS tokens {eos or 'none'}: pass template=, placeholder= and stop= (or put a {OPTIONS_FILE} "
            "beside the model's weights) to choose")


def cache_keyword(model: Any) -> str:
    """The keyword under which ``model``'s forward takes (and its output holds) the key/value
    cache: ``cache`` in the transformers versions that renamed it, which warn on every pass given
    the old name (a FutureWarning that leaked into the CLI's piped stderr), else
    ``past_key_values``. A peft model passes it through to its base model."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return _cache_keyword(type(base))


@functools.lru_cache(maxsize=None)
def _cache_keyword(model_class: type) -> str:
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``None`` picks the first CUDA device when there is one, else the CPU."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """``None`` is float32 on CPU and bfloat16 on GPU; strings name a floating dtype."""
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise InvalidParameterError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    return _DTYPES[dtype]


@dataclass
class DecodeState:
    """What a backend carries from one step to the next for a batch of sequences."""

    cache: Any  # transformers DynamicCache, batch axis = flat rows
    attention_mask: torch.Tensor  # (Rtot, Lpast) int64, 0 on padding
    next_position: torch.Tensor  # (Rtot,) int64, position id of the next token per row
    row_sequence: torch.Tensor  # (Rtot,) int64, index of the sequence each row belongs to
    rows_per_sequence: tuple[int, ...]
    adapters: tuple[str, ...] | None = None  # (Rtot,) peft adapter name per row; None without peft


class HFBackend:
    """A causal LM from transformers: ``prefill`` the rows, then ``decode`` token by token.

    Build it with :meth:`load` (a local directory or a hub id), with :meth:`from_model` (a
    transformers or peft model object, checked, with its tokendp.json when one lies beside its
    weights), or directly from a loaded model and tokenizer. The model is put in ``eval()`` mode
    and every pass runs under ``torch.inference_mode``.
    """

    def __init__(self, model: Any, tokenizer: Any, *, name: str = "", options: dict | None = None,
                 as_given: bool = False) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name or model_label(model)
        self.options = dict(options or {})
        self.device = _input_device(model)
        # True: rows that name no adapter run the model as given (a PeftModel with its active
        # adapters); False: in a model with adapters they read the base model, as the public row of
        # a mixed adapter batch (PMixED) must
        self.as_given = as_given
        self._zero: tuple[tuple[str, ...], tuple[str, ...]] | None = None  # (adapters, zero_adapters())

    @classmethod
    def from_model(cls, model: Any, tokenizer: Any = None, *, device: str | torch.device | None = None,
                   dtype: str | torch.dtype | None = None, name: str | None = None,
                   as_given: bool = True) -> HFBackend:
        """A backend for a model object: a transformers causal LM (``PreTrainedModel`` with an LM
        head) or a peft ``PeftModel`` around one, on any device and in any dtype, with its
        ``tokenizer`` (default: the tokenizer saved beside the model's weights, when its
        ``name_or_path`` is a local directory or a cached hub id).

        The model is used in place: put in ``eval()`` mode, and moved or cast (``model.to``)
        only when ``device`` or ``dtype`` is given. ``tokendp.json`` (prompt template,
        placeholder, stop strings) is read from the model's ``name_or_path`` directory when there
        is one; otherwise the jobs fall back to the tokenizer's chat template and say so once
        per model in a warning on the ``tokendp`` logger (:func:`describe_defaults`).
        ``as_given`` (default True): a PeftModel runs with its active adapters; False: rows
        without an adapter read the base model (a mixed adapter batch, as PMixED's).
        """
        check_model_object(model)
        tokenizer = _tokenizer_for(model) if tokenizer is None else tokenizer
        check_tokenizer(tokenizer)
        if device is not None or dtype is not None:
            target = resolve_device(device) if device is not None else _input_device(model)
            model = model.to(device=target, dtype=None if dtype is None else resolve_dtype(dtype, target))
        folder = _local_folder(model)
        options_path = None if folder is None else folder / OPTIONS_FILE
        found = options_path is not None and options_path.is_file()
        options = json.loads(options_path.read_text(encoding="utf-8")) if found else {}
        backend = cls(model, tokenizer, name=name or model_label(model), options=options, as_given=as_given)
        if not found and _first_time(model):
            log.warning("%s", describe_defaults(backend))
        return backend

    @property
    def adapters(self) -> tuple[str, ...]:
        """Names of the LoRA adapters loaded (empty without peft)."""
        config = getattr(self.model, "peft_config", None)
        return tuple(config) if isinstance(config, Mapping) else ()

    def zero_adapters(self) -> tuple[str, ...]:
        """Loaded adapters whose every LoRA B matrix is exactly 0: they compute the base model
        (an adapter trained on nothing), so their rows can be read as the public row's twins.
        Found once per set of loaded adapters (they load frozen), not on every call."""
        if self._zero is not None and self._zero[0] == self.adapters:
            return self._zero[1]
        zero = []
        for adapter in self.adapters:
            found, nonzero = False, False
            for module in self.model.modules():
                for attr in ("lora_B", "lora_embedding_B"):
                    table = getattr(module, attr, None)
                    if table is None or adapter not in table:
                        continue
                    found = True
                    weight = table[adapter].weight if hasattr(table[adapter], "weight") else table[adapter]
                    nonzero = nonzero or bool(torch.count_nonzero(weight).item())
            if found and not nonzero:
                zero.append(adapter)
        self._zero = (self.adapters, tuple(zero))
        return self._zero[1]

    def add_adapters(self, adapters: Mapping[str, str | Path]) -> None:
        """Load LoRA adapters saved in PEFT's layout (``adapter_config.json`` and
        ``adapter_model.safetensors``), ``{name: directory}``; the model becomes a peft model."""
        from tokendp._optional import require

        peft = require("peft", "ensemble", "LoRA adapters", why="to read adapters")
        for adapter, path in adapters.items():
            if not isinstance(adapter, str) or not adapter or adapter == BASE_ADAPTER:
                raise InvalidParameterError(f"an adapter needs a non-empty name other than {BASE_ADAPTER!r}, got {adapter!r}")
            if adapter in self.adapters:
                raise InvalidInputError(f"adapter {adapter!r} is loaded already")
            if not (Path(path) / "adapter_config.json").is_file():
                raise InvalidInputError(f"adapter {adapter!r}: {path} has no adapter_config.json (PEFT's layout)")
            with warnings.catch_warnings():  # peft calls transformers' deprecated is_gradient_checkpointing
                warnings.simplefilter("ignore", FutureWarning)
                if isinstance(self.model, peft.PeftModel):
                    self.model.load_adapter(str(path), adapter_name=adapter, is_trainable=False)
                else:
                    self.model = peft.PeftModel.from_pretrained(self.model, str(path), adapter_name=adapter,
                                                                is_trainable=False)
        self.model.eval()

    def merge_adapter(self, path: str | Path) -> None:
        """Merge the LoRA adapter saved at ``path`` (PEFT's layout) into the model's weights, by
        peft (``PeftModel.from_pretrained`` then ``merge_and_unload``): every adapted layer
        becomes ``W + s B A`` with ``s = lora_alpha / r`` (``lora_alpha / sqrt(r)`` with
        ``use_rslora``), DoRA's magnitudes and LoRA biases folded in, ``modules_to_save`` copied
        over. The adapter is read into float32 (peft's ``autocast_adapter_dtype``) and ``s B A``
        is added in place, so a bfloat16 or float16 weight is rounded once. The merged model then
        runs exactly at the base model's cost."""
        from tokendp._optional import require

        peft = require("peft", "smollm2", "a merged LoRA adapter (--model rewriter)", why="to merge it")
        path = Path(path)
        if not (path / "adapter_config.json").is_file():
            raise InvalidInputError(f"{path} is not a LoRA adapter directory (it has no adapter_config.json, PEFT's layout)")
        if isinstance(self.model, peft.PeftModel):
            raise InvalidInputError("merge the adapter before loading per-row adapters (add_adapters)")
        with warnings.catch_warnings():  # peft calls transformers' deprecated is_gradient_checkpointing
            warnings.simplefilter("ignore", FutureWarning)
            try:
                wrapped = peft.PeftModel.from_pretrained(self.model, str(path), is_trainable=False)
            except (ValueError, RuntimeError, KeyError) as exc:
                raise InvalidInputError(f"the adapter at {path} does not fit this model: {exc}") from None
            self.model = wrapped.merge_and_unload().eval()

    @classmethod
    def load(cls, model: str | Path, *, device: str | torch.device | None = None,
             dtype: str | torch.dtype | None = None, name: str | None = None,
             adapters: Mapping[str, str | Path] | None = None) -> HFBackend:
        """Load ``model`` (a local directory or a hub id) with its tokenizer and ``tokendp.json``,
        and the LoRA ``adapters`` ``{name: directory}`` (PEFT's layout) when given.

        ``name`` is how reports refer to the model (default: ``model`` as given).
        """
        from transformers import AutoModelForCausalLM, AutoTokenizer

        dev = resolve_device(device)
        torch_dtype = resolve_dtype(dtype, dev)
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(model))
            lm = AutoModelForCausalLM.from_pretrained(str(model), dtype=torch_dtype)
        except OSError as exc:
            raise InvalidInputError(
                f"cannot load model {str(model)!r}: pass a local model directory or a hub id that is "
                f"in the local Hugging Face cache ({type(exc).__name__})") from None
        options_path = Path(model) / OPTIONS_FILE
        options = json.loads(options_path.read_text()) if options_path.is_file() else {}
        backend = cls(lm.to(dev), tokenizer, name=name or str(model), options=options)
        if adapters:
            backend.add_adapters(adapters)
        return backend

    @property
    def eos_token_ids(self) -> list[int]:
        """Token ids that end generation: the tokenizer's EOS and the generation config's."""
        ids = {self.tokenizer.eos_token_id}
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        ids |= set(gen_eos) if isinstance(gen_eos, (list, tuple)) else {gen_eos}
        return sorted(i for i in ids if i is not None)

    @property
    def vocab_size(self) -> int:
        """Width V of the logits (the LM head's output size, which may exceed the tokenizer's)."""
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def max_context(self) -> int | None:
        """Longest sequence the model's position embeddings cover, when the config says."""
        from tokendp.models.registry import CONTEXT_KEYS, context_of

        return context_of({key: getattr(self.model.config, key, None) for key in CONTEXT_KEYS})

    def check_fits(self, prompt_tokens: int, max_new_tokens: int) -> None:
        """Raise when ``prompt_tokens + max_new_tokens`` exceeds the model's context."""
        limit = self.max_context
        if limit is not None and prompt_tokens + max_new_tokens > limit:
            raise InvalidInputError(
                f"the prompt has {prompt_tokens} tokens and max_new_tokens is {max_new_tokens}, "
                f"{prompt_tokens + max_new_tokens} in all, more than the model's context of {limit} "
                "tokens: shorten the document (split it) or lower max_new_tokens")

    # ------------------------------------------------------------------ forward passes
    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
                 cache: Any, adapters: Sequence[str] | None = None, keep: int = 1) -> torch.Tensor:
        """One pass; returns the logits of the last ``keep`` positions ``# (B, keep, V)`` float32.
        ``adapters``: peft's adapter name per row (a mixed adapter batch), given whenever the
        model is a peft model."""
        extra = {} if adapters is None else {"adapter_names": list(adapters)}
        extra[cache_keyword(self.model)] = cache
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                         logits_to_keep=keep, **extra)
        return out.logits[:, -keep:, :].float()  # (B, keep, V)

    def _row_adapters(self, sequences: Sequence[RowSequence]) -> tuple[str, ...] | None:
        """peft's adapter name per flat row, or None when the model has no adapters; unknown
        adapters are refused (their names are public: shard names, never shard content)."""
        wanted = {r.adapter for s in sequences for r in s.rows} - {None}
        loaded = self.adapters
        if not loaded:
            if wanted:
                raise InvalidInputError(
                    f"rows read with LoRA adapters ({', '.join(sorted(wanted))}) but the model has none loaded; "
                    "load them with HFBackend.load(..., adapters=) or add_adapters")
            return None
        if self.as_given:
            if wanted:
                raise InvalidInputError(
                    "rows name LoRA adapters, but this backend runs the model as given (with its active "
                    "adapters); build HFBackend(model, tokenizer) for a mixed adapter batch")
            return None  # no adapter_names: peft runs its active adapters
        unknown = wanted - set(loaded)
        if unknown:
            raise InvalidInputError(
                f"unknown adapter(s) {', '.join(sorted(unknown))}; loaded: {', '.join(loaded)}")
        return tuple(r.adapter or BASE_ADAPTER for s in sequences for r in s.rows)

    def _new_cache(self) -> Any:
        from transformers import DynamicCache

        from tokendp.backends.cache import growing

        return growing(DynamicCache(config=self.model.config))

    @torch.inference_mode()
    def prefill(self, sequences: Sequence[RowSequence], *, share_prefix: bool = True
                ) -> tuple[DecodeState, torch.Tensor]:
        """Run every row of every sequence; return the state and logits ``# (Rtot, V)``.

        Rows are flattened in order (sequence 0's rows, then sequence 1's, ...). With
        ``share_prefix`` the tokens common to all rows of a sequence are computed once. A
        sequence given more than once (the same object: copies by the caller's construction, as
        when several mechanisms rewrite one document) is computed once and its cache copied to
        each place; never by comparing rows, whose equality may depend on private text
        (docs/privacy.md, "Equal rows, equal logits").
        """
        distinct = list({id(s): s for s in sequences}.values())
        if len(distinct) < len(sequences):
            state, logits = self.prefill(distinct, share_prefix=share_prefix)
            source = [distinct.index(s) for s in sequences]
            rows = _rows_of(state.rows_per_sequence, source)  # (Rtot,)
            return self.select(state, source), logits[rows.to(logits.device)]
        adapters = self._row_adapters(sequences)
        prefix_lens = [s.shared_prefix_length() if share_prefix else 0 for s in sequences]
        counts = tuple(len(s) for s in sequences)
        row_sequence = torch.repeat_interleave(torch.arange(len(sequences)), torch.tensor(counts))
        cache = self._new_cache()
        prefix_mask = self._prefill_prefixes(sequences, prefix_lens, row_sequence, cache, adapters is not None)
        suffixes = [r.ids[p:] for s, p in zip(sequences, prefix_lens) for r in s.rows]
        width = max(s.layout_length - p for s, p in zip(sequences, prefix_lens))  # public (RowSequence)
        ids, mask = _left_pad(suffixes, self._pad_id(), width)
        row_prefix = torch.tensor(prefix_lens)[row_sequence]  # (Rtot,)
        positions = (row_prefix[:, None] + mask.cumsum(-1) - 1).clamp(min=0)  # (Rtot, S)
        full_mask = mask if prefix_mask is None else torch.cat([prefix_mask, mask], dim=1)
        logits = self._forward(ids.to(self.device), full_mask.to(self.device),
                               positions.to(self.device), cache, adapters)[:, 0]  # (Rtot, V)
        next_position = row_prefix + mask.sum(-1)  # (Rtot,)
        state = DecodeState(cache, full_mask.to(self.device), next_position.to(self.device),
                            row_sequence.to(self.device), counts, adapters)
        return state, logits

    def _prefill_prefixes(self, sequences: Sequence[RowSequence], prefix_lens: list[int],
                          row_sequence: torch.Tensor, cache: Any, peft: bool = False) -> torch.Tensor | None:
        """Run the shared prefixes (one row per sequence) and spread their cache to all rows.

        Returns the prefix part of the attention mask ``# (Rtot, P)``, or None when no sequence
        has a shared prefix. Sequences without one point at any computed row: their mask is 0
        over the whole prefix block, so those keys and values are never read.
        """
        with_prefix = [i for i, p in enumerate(prefix_lens) if p > 0]
        if not with_prefix:
            return None
        ids, mask = _left_pad([sequences[i].rows[0].ids[:prefix_lens[i]] for i in with_prefix],
                              self._pad_id())
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (Np, P)
        adapters = [sequences[i].rows[0].adapter or BASE_ADAPTER for i in with_prefix] if peft else None
        self._forward(ids.to(self.device), mask.to(self.device), positions.to(self.device), cache, adapters)
        slot = torch.zeros(len(sequences), dtype=torch.long)
        slot[with_prefix] = torch.arange(len(with_prefix))
        cache.batch_select_indices(slot[row_sequence].to(self.device))
        row_mask = mask[slot[row_sequence]]  # (Rtot, P)
        no_prefix = torch.tensor([p == 0 for p in prefix_lens])[row_sequence]  # (Rtot,)
        row_mask[no_prefix] = 0
        return row_mask

    def decode(self, state: DecodeState, tokens: torch.Tensor) -> torch.Tensor:
        """Append ``tokens # (N,)`` (one per sequence) to all its rows; logits ``# (Rtot, V)``."""
        return self.extend(state, tokens[:, None])[:, 0]

    @torch.inference_mode()
    def extend(self, state: DecodeState, tokens: torch.Tensor) -> torch.Tensor:
        """Append ``tokens # (N, P)`` (P per sequence) to all its rows in one pass; returns the
        logits after each of them ``# (Rtot, P, V)``: position j predicts what follows
        ``tokens[:, :j + 1]``. :meth:`rollback` forgets a tail of them again."""
        width = tokens.shape[1]
        ids = tokens.to(self.device)[state.row_sequence]  # (Rtot, P)
        ones = torch.ones_like(state.attention_mask[:, :1]).expand(-1, width)  # (Rtot, P)
        state.attention_mask = torch.cat([state.attention_mask, ones], dim=1)
        positions = state.next_position[:, None] + torch.arange(width, device=self.device)  # (Rtot, P)
        logits = self._forward(ids, state.attention_mask, positions, state.cache, state.adapters, keep=width)
        state.next_position = state.next_position + width
        return logits

    @property
    def can_roll_back(self) -> bool:
        """Whether :meth:`rollback` is exact for this model: every layer keeps full attention
        in a plain key/value cache (a sliding window or a recurrent state cannot forget a tail)."""
        from tokendp.backends.cache import GrowingLayer

        return all(type(layer) is GrowingLayer for layer in self._new_cache().layers)

    @torch.inference_mode()
    def rollback(self, state: DecodeState, forget: torch.Tensor) -> None:
        """Forget the last ``forget[n]`` positions of every row of sequence n ``# (N,)`` int64,
        all of them appended by the last :meth:`extend`: as if they had never been appended.

        The tail every row forgets is cropped from the cache; the rest becomes a hole that the
        attention mask hides (mask 0, like the padding between a shared prefix and a row's
        suffix), and the next positions continue the row's own position ids.
        """
        row_forget = forget.to(self.device)[state.row_sequence]  # (Rtot,)
        common = int(forget.min())
        if common:
            state.cache.crop(-common)
            state.attention_mask = state.attention_mask[:, :-common]
        width = int(forget.max()) - common
        if width:
            tail = torch.arange(width, 0, -1, device=self.device)  # (W,): distance from the end
            hidden = tail[None, :] <= (row_forget - common)[:, None]  # (Rtot, W)
            state.attention_mask[:, -width:] = state.attention_mask[:, -width:].masked_fill(hidden, 0)
        state.next_position = state.next_position - row_forget

    @torch.inference_mode()
    def keep(self, state: DecodeState, keep: torch.Tensor) -> DecodeState:
        """Drop finished sequences: ``keep # (N,) bool``. Returns the state of the kept ones."""
        return self.select(state, [n for n, kept in enumerate(keep.tolist()) if kept])

    @torch.inference_mode()
    def select(self, state: DecodeState, source: Sequence[int]) -> DecodeState:
        """The state of sequences ``source`` of ``state``, in that order: each one's rows (cache,
        mask, positions, adapters); a sequence named twice is copied. The row index comes from the
        host's row counts, nothing read back from the device."""
        counts = tuple(state.rows_per_sequence[k] for k in source)
        rows = _rows_of(state.rows_per_sequence, source)  # (Rtot',)
        on_device = rows.to(self.device)
        state.cache.batch_select_indices(on_device)
        row_sequence = torch.repeat_interleave(torch.arange(len(source)), torch.tensor(counts, dtype=torch.long))
        adapters = None if state.adapters is None else tuple(state.adapters[i] for i in rows.tolist())
        return DecodeState(state.cache, state.attention_mask[on_device], state.next_position[on_device],
                           row_sequence.to(self.device), counts, adapters)

    @property
    def can_join(self) -> bool:
        """Whether :meth:`join` can merge two states of this model: every layer keeps full
        attention in a plain key/value cache (as for :meth:`can_roll_back`)."""
        return self.can_roll_back

    @torch.inference_mode()
    def join(self, state: DecodeState, other: DecodeState) -> DecodeState:
        """One state holding the rows of ``state`` then those of ``other`` (continuous batching:
        documents prefilled apart join a running batch between two steps).

        The shorter cache is left padded to the longer one's length with zeros under mask 0, so
        every row attends to exactly the keys and values it had; its positions are its own. How
        much a row is padded depends on the two caches' lengths only (public layout lengths and
        the number of tokens released so far), never on the rows' tokens.
        """
        length = max(state.attention_mask.shape[1], other.attention_mask.shape[1])
        for mine, theirs in zip(state.cache.layers, other.cache.layers):
            mine.keys = torch.cat([_pad_left(mine.keys, length), _pad_left(theirs.keys, length)], dim=0)
            mine.values = torch.cat([_pad_left(mine.values, length), _pad_left(theirs.values, length)], dim=0)
        mask = torch.cat([_pad_left(state.attention_mask, length, dim=1),
                          _pad_left(other.attention_mask, length, dim=1)], dim=0)  # (Rtot, L)
        offset = len(state.rows_per_sequence)
        adapters = None if state.adapters is None or other.adapters is None else state.adapters + other.adapters
        return DecodeState(state.cache, mask, torch.cat([state.next_position, other.next_position]),
                           torch.cat([state.row_sequence, other.row_sequence + offset]),
                           state.rows_per_sequence + other.rows_per_sequence, adapters)

    @torch.inference_mode()
    def compact(self, state: DecodeState) -> None:
        """Drop the leading cache positions that no row attends to (mask 0 in every row), as
        left after the longest rows leave a continuous batch; nothing a row reads changes."""
        seen = state.attention_mask.any(dim=0)  # (L,)
        if not bool(seen[0]) and bool(seen.any()):
            first = int(seen.int().argmax())
            for layer in state.cache.layers:
                layer.keys, layer.values = layer.keys[..., first:, :], layer.values[..., first:, :]
            state.attention_mask = state.attention_mask[:, first:]

    def _pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id
        return int(pad) if pad is not None else 0


def _rows_of(counts: Sequence[int], source: Sequence[int]) -> torch.Tensor:
    """Flat row indices ``# (R,)`` int64 of sequences ``source`` in a layout of ``counts[n]`` rows
    for sequence n (each sequence's rows together, in order)."""
    starts = [0, *itertools.accumulate(counts)]
    return torch.tensor([r for k in source for r in range(starts[k], starts[k + 1])], dtype=torch.long)


def _pad_left(x: torch.Tensor, length: int, dim: int = -2) -> torch.Tensor:
    """``x`` with zeros before its first position along ``dim`` up to ``length`` positions."""
    missing = length - x.shape[dim]
    if missing == 0:
        return x
    shape = list(x.shape)
    shape[dim] = missing
    return torch.cat([x.new_zeros(shape), x], dim=dim)


def _left_pad(rows: Sequence[Sequence[int]], pad_id: int, width: int | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token id rows to ``width`` (default: the longest): ids ``# (B, L)`` int64 and
    mask ``# (B, L)`` int64 (1 = real)."""
    width = max(len(r) for r in rows) if width is None else width
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if len(r):
            ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r):] = 1
    return ids, mask


DEFAULT_MODEL_NAME = "tokendp-default"


@functools.lru_cache(maxsize=2)
def _load_cached(model: str, device: str | None, dtype: str | None, name: str | None) -> HFBackend:
    """A model directory or hub id, loaded once; one warning on what the jobs use when it has no
    tokendp.json (:func:`describe_defaults`: public settings only)."""
    backend = HFBackend.load(model, device=device, dtype=dtype, name=name)
    if name is None and not backend.options:
        log.warning("%s", describe_defaults(backend))
    return backend


def load_named_model(name: str, *, device: Any = None, dtype: Any = None, adapter: str | Path | None = None,
                     cache: bool = True, force: bool = False) -> HFBackend:
    """An HFBackend for a registered name (:mod:`tokendp.models.registry`): ``tiny``, ``smollm2``,
    or ``rewriter`` (SmolLM2 with the rewriter's LoRA adapter, or ``adapter``, merged in).

    The rewriter is merged once and cached (:mod:`tokendp.models.merged`): later loads read the
    merged directory and skip peft. ``cache=False`` merges in memory and writes nothing;
    ``force`` rebuilds the merged cache."""
    from tokendp.models import DEFAULT_MODEL_DIR
    from tokendp.models.registry import adapter_dir, base_model_dir, unknown_name_error

    if name == "tiny":
        return HFBackend.load(DEFAULT_MODEL_DIR, device=device, dtype=dtype, name="tiny")
    if name not in ("smollm2", "rewriter"):
        raise unknown_name_error(name)
    path = adapter_dir(adapter) if name == "rewriter" else None
    label = name if adapter is None else f"rewriter:{path}"
    base = base_model_dir()
    if path is None:
        backend = HFBackend.load(base, device=device, dtype=dtype, name=label)
    else:
        backend = _load_merged(base, path, label, device, dtype, cache=cache, force=force)
    # A sampled answer may skip <|im_end|> and open a new chat turn; that ends it too.
    backend.options.setdefault("stop", ["<|im_start|>"])
    return backend


def _merge_in_memory(base: Path, adapter: Path, label: str, device: torch.device, dtype: torch.dtype,
                     on_step: Any = None) -> HFBackend:
    """The base model with ``adapter`` merged in by peft, and the adapter's tokendp.json."""
    from tokendp.models.merged import MERGE_STEPS

    step = on_step or (lambda name: None)
    step(MERGE_STEPS[0])
    backend = HFBackend.load(base, device=device, dtype=dtype, name=label)
    step(MERGE_STEPS[1])
    backend.merge_adapter(adapter)
    options = adapter / OPTIONS_FILE
    if options.is_file():
        backend.options = json.loads(options.read_text(encoding="utf-8"))
    return backend


def _load_merged(base: Path, adapter: Path, label: str, device: Any, dtype: Any, *, cache: bool,
                 force: bool) -> HFBackend:
    """The merged rewriter: read from its cache directory when a good one is there; else merged
    in memory by peft and saved there (atomically) for the next process. A cache that cannot be
    written (read-only or full disk) costs only the saving: the model merged in memory is used."""
    from tokendp.models.cache import ModelCacheError, reported
    from tokendp.models.merged import MERGE_STEPS, check_merged, merge_fields, merged_dir, write_merged

    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    if not cache:
        return _merge_in_memory(base, adapter, label, dev, torch_dtype)
    fields = merge_fields(adapter, base, str(torch_dtype).removeprefix("torch."), dev.type)
    dest = merged_dir(fields, base.parent)
    if dest.exists() and not force:
        try:
            check_merged(dest, fields)
            return HFBackend.load(dest, device=dev, dtype=torch_dtype, name=label)
        except ModelCacheError as err:
            log.warning("%s", err)
            force = True
    with reported(f"caching the merged rewriter once into {dest} (a few seconds)", None, steps=MERGE_STEPS,
                  kind="merge") as on_step:
        backend = _merge_in_memory(base, adapter, label, dev, torch_dtype, on_step)
        on_step(MERGE_STEPS[2])
        try:
            write_merged(dest, fields, functools.partial(backend.model.save_pretrained, safe_serialization=True),
                         base=base, adapter=adapter, force=force)
        except Exception as exc:  # noqa: BLE001 - the cache is an optimisation: any failure to write it
            log.warning("could not cache the merged rewriter in %s (%s: %s); it is merged in memory, in every "
                        "process, until the cache can be written", dest.parent, type(exc).__name__, exc)
    return backend


def load_model(model: str | Path, *, device: Any = None, dtype: Any = None,
               adapters: Mapping[str, str | Path] | None = None) -> HFBackend:
    """A fresh (uncached) HFBackend for a registered name (``smollm2``, ``tiny``, ...) or a model
    directory / cached hub id, with the LoRA ``adapters`` ``{name: directory}`` loaded when given.
    For callers that change the model (training wraps it in LoRA layers) or add adapters to it."""
    from tokendp.models.registry import is_model_name

    if is_model_name(model):
        backend = load_named_model(str(model), device=device, dtype=dtype)
    else:
        backend = HFBackend.load(model, device=device, dtype=dtype)
    if adapters:
        backend.add_adapters(adapters)
    return backend


@functools.lru_cache(maxsize=2)
def _load_named(name: str, device: str | None, dtype: str | None) -> HFBackend:
    return load_named_model(name, device=device, dtype=dtype)


def load_backend(model: str | Path | HFBackend | Any | None = None, *, tokenizer: Any = None,
                 device: str | torch.device | None = None, dtype: str | torch.dtype | None = None) -> HFBackend:
    """A backend for ``model``: an HFBackend (returned as is), a transformers causal LM or peft
    model object with its ``tokenizer`` (:meth:`HFBackend.from_model`: run as given, in place), a
    registered name (``rewriter``, ``smollm2``, ``tiny``; see :mod:`tokendp.models.registry`), a
    local directory, a hub id, or None for the embedded default model (``tiny``). The last two
    loaded by name are cached."""
    if is_model_object(model):
        return HFBackend.from_model(model, tokenizer, device=device, dtype=dtype)
    if tokenizer is not None:
        raise InvalidParameterError("tokenizer= goes with a model object; a model given by name, directory or "
                                    "HFBackend brings its own tokenizer")
    if isinstance(model, HFBackend):
        return model
    if model is not None and not isinstance(model, (str, Path)):
        check_model_object(model)  # raises, naming the type only
    from tokendp.models.registry import is_model_name

    if is_model_name(model):
        return _load_named(str(model), device, dtype)
    if model is None:
        from tokendp.models import DEFAULT_MODEL_DIR

        if not (Path(DEFAULT_MODEL_DIR) / "config.json").is_file():
            raise InvalidInputError("the embedded default model is not installed; pass model= (a directory or hub id)")
        return _load_cached(str(DEFAULT_MODEL_DIR), device, dtype, DEFAULT_MODEL_NAME)
    return _load_cached(str(model), device, dtype, None)
