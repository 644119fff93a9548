"""A sanitize job's settings in one object, checked when built (as transformers' GenerationConfig).

:class:`SanitizeConfig` holds everything that decides a rewrite and its certificate apart from
the documents, the model and the seed. Building one checks every value without importing torch,
so that a bad parameter fails before anything is loaded, tagged or charged (the command line
builds it first). ``tokendp.sanitize(text, epsilon=8, ...)`` builds it from its keywords;
:func:`tokendp.jobs.sanitize.prepare_sanitize` takes it whole.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tokendp.accounting.filter import dp_fusion_filter_alpha, dp_fusion_filter_budget
from tokendp.accounting.mechanisms import dp_fusion_alpha, dp_fusion_beta
from tokendp.errors import InvalidParameterError
from tokendp.params import (DEFAULT_NO_REPEAT_NGRAM_SIZE, DEFAULT_PACE, DEFAULT_PASSAGE_TOKENS,
                            DEFAULT_STOP_AT_REPEATED_LINE, Accounting, Budget, Method, check_accounting, check_flag,
                            check_params, check_tokens, is_number)
from tokendp.text.contexts import GroupSpec
from tokendp.text.taggers.labels import LabelChoice


def check_reachable(method: str, accounting: str, alpha: float | None, delta: float, epsilon: Budget) -> None:
    """DP-Fusion's smallest positive epsilon target must be reachable at ``delta``: above the
    RDP-to-(epsilon, delta) conversion's offset at ``alpha`` (or at some order of the grid when
    alpha is None; under the filter, at the order it would choose). Neither T nor the groups
    enter this condition, so it is checked before any text is read or model loaded."""
    if method != "dp-fusion" or epsilon is None:
        return
    targets = [v for v in (epsilon.values() if isinstance(epsilon, Mapping) else [epsilon]) if v > 0]
    if not targets:
        return
    e = float(min(targets))
    if accounting == "filter":
        if alpha is None:
            dp_fusion_filter_alpha(epsilon=e, delta=delta)
        else:
            dp_fusion_filter_budget(epsilon=e, alpha=alpha, delta=delta)
    elif alpha is None:
        dp_fusion_alpha([(e, 1, 1)], delta=delta)
    else:
        dp_fusion_beta(epsilon=e, alpha=alpha, groups=1, max_tokens=1, delta=delta)


@dataclass(frozen=True)
class SanitizeConfig:
    """The settings of a sanitize job (the parameters of :func:`tokendp.sanitize`, documented
    there and in docs/sanitize.md): privacy (``method`` to ``keep``), length (``max_new_tokens``),
    decoding (``temperature`` to ``draft_tokens``), prompt (``instruction`` to ``on_overlap``) and
    DP-Fusion's accounting (``accounting``, ``pace``)."""

    method: Method = "dp-fusion"
    epsilon: Budget = None
    beta: Budget = None
    alpha: float | None = None
    delta: float = 1e-5
    groups: GroupSpec = "by-label"
    labels: str | Sequence[str] | None = None
    keep: str | Sequence[str] | None = None
    max_new_tokens: int | None = None
    temperature: float = 0.7
    stop: Sequence[str] = ()
    no_repeat_ngram_size: int = DEFAULT_NO_REPEAT_NGRAM_SIZE
    repetition_penalty: float = 1.0
    stop_at_repeated_line: bool = DEFAULT_STOP_AT_REPEATED_LINE
    speculative: bool | None = None
    draft_tokens: int = 8
    instruction: str | None = None
    template: str | None = None
    placeholder: str | None = None
    on_overlap: Literal["merge", "error"] = "merge"
    accounting: Accounting = "fixed"
    pace: float = DEFAULT_PACE
    passage_tokens: int | None = DEFAULT_PASSAGE_TOKENS

    def __post_init__(self) -> None:
        check_params(self.method, self.alpha, self.delta, self.temperature, self.beta, self.epsilon)
        check_accounting(self.accounting, self.pace, self.method, self.beta)
        check_reachable(self.method, self.accounting, self.alpha, self.delta, self.epsilon)
        check_tokens("max_new_tokens", self.max_new_tokens)
        if not (self.groups in ("by-label", "single") or isinstance(self.groups, Mapping)):
            raise InvalidParameterError(f"groups must be 'by-label', 'single' or a mapping label -> group, "
                                        f"got {self.groups!r}")
        if self.on_overlap not in ("merge", "error"):
            raise InvalidParameterError(f"on_overlap must be 'merge' or 'error', got {self.on_overlap!r}")
        if isinstance(self.stop, str) or not all(isinstance(s, str) and s for s in self.stop):
            raise InvalidParameterError(f"stop must be a list of non-empty strings, got {self.stop!r}")
        if isinstance(self.no_repeat_ngram_size, bool) or not isinstance(self.no_repeat_ngram_size, int) \
                or self.no_repeat_ngram_size < 0:
            raise InvalidParameterError(f"no_repeat_ngram_size must be an integer >= 0, got "
                                        f"{self.no_repeat_ngram_size!r}")
        if not (is_number(self.repetition_penalty) and self.repetition_penalty > 0):
            raise InvalidParameterError(f"repetition_penalty must be a number > 0 (1: off), got "
                                        f"{self.repetition_penalty!r}")
        check_flag("stop_at_repeated_line", self.stop_at_repeated_line)
        check_tokens("draft_tokens", self.draft_tokens)
        if self.passage_tokens is not None:
            check_tokens("passage_tokens", self.passage_tokens)
            if self.passage_tokens < 16:
                raise InvalidParameterError(f"passage_tokens must be at least 16 (or None: one passage), got "
                                            f"{self.passage_tokens}")
        object.__setattr__(self, "stop", tuple(self.stop))
        self.label_choice  # noqa: B018 (checks labels and keep now)

    @functools.cached_property
    def label_choice(self) -> LabelChoice:
        """What the job protects and what it keeps as plain text."""
        return LabelChoice.of(self.labels, self.keep)

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> SanitizeConfig:
        """The config of a call's keyword arguments (``values``, e.g. ``locals()``): its fields
        are taken by name, everything else (the documents, the model, the seed) is left out."""
        return cls(**{f.name: values[f.name] for f in dataclasses.fields(cls) if f.name in values})

    def replace(self, **changes: Any) -> SanitizeConfig:
        """A copy with ``changes``, checked again."""
        return dataclasses.replace(self, **changes)
