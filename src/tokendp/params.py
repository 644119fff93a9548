"""Checks of the jobs' public parameters, without torch: they run before anything is imported,
loaded or charged, and their messages name the parameter and what to do."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from tokendp.errors import InvalidInputError, InvalidParameterError

Method = Literal["dp-fusion", "original", "public"]
METHODS = ("dp-fusion", "original", "public")
Accounting = Literal["fixed", "filter"]
ACCOUNTINGS = ("fixed", "filter")
#: The filter accounting's per-step cap: one token may spend at most pace * B_i / n_i of group
#: i's budget, n_i its hidden tokens (docs/sanitize.md, "Accounting: fixed or filter").
DEFAULT_PACE = 0.5
#: The most document tokens one passage holds: longer documents are rewritten passage by passage
#: (docs/sanitize.md, "Long documents"); the rewriter was trained on passages of up to about 300.
DEFAULT_PASSAGE_TOKENS = 320
#: The public decoding constraints against loops that sanitize applies unless told otherwise,
#: chosen on TAB's tuning half and held-out letters (docs/sanitize.md, "Loops"): no token that
#: repeats a released n-gram of this many tokens, and an end at a line that repeats an earlier one.
DEFAULT_NO_REPEAT_NGRAM_SIZE = 16
DEFAULT_STOP_AT_REPEATED_LINE = False
Budget = float | Mapping[str, float] | None
MAX_ALPHA = 1024.0  # above this, alpha * beta and (alpha - 1) * divergence leave float64's useful range
MIN_TEMPERATURE = 1e-3  # below this, float32 logits / temperature overflow to inf and nothing can be sampled


def is_number(value: Any) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_temperature(temperature: float, *, greedy: bool = True) -> None:
    """A sampling temperature: a finite number >= :data:`MIN_TEMPERATURE`, or 0 (greedy) where
    ``greedy`` allows it (a private method refuses 0 itself, with its reason)."""
    if not (is_number(temperature) and (temperature >= MIN_TEMPERATURE or (greedy and temperature == 0))):
        floor = f"{'0 (greedy) or ' if greedy else ''}a finite number >= {MIN_TEMPERATURE:g}"
        raise InvalidParameterError(f"temperature must be {floor}, got {temperature!r}")


def check_budget(value: Budget, what: str) -> None:
    """A budget (beta or epsilon): None, a finite number >= 0, or a mapping group -> such a number."""
    if value is None:
        return
    items = value.items() if isinstance(value, Mapping) else [(None, value)]
    for name, v in items:
        if not (is_number(v) and v >= 0):
            where = "" if name is None else f" for group {name}"
            raise InvalidParameterError(f"{what}{where} must be a finite number >= 0, got {v!r}")


def check_params(method: str, alpha: float | None, delta: float, temperature: float,
                 beta: Budget, epsilon: Budget) -> None:
    """Validate a DP-Fusion job's privacy parameters (sanitize, generate)."""
    if method not in METHODS:
        raise InvalidParameterError(f"method must be one of {METHODS}, got {method!r}")
    if alpha is not None and not (is_number(alpha) and 1 < alpha <= MAX_ALPHA):
        raise InvalidParameterError(f"alpha (the Renyi order) must be a number in (1, {MAX_ALPHA:g}], got {alpha!r}; "
                                    "typical choices are 2 to 10, or leave it out to let tokendp choose")
    if not (is_number(delta) and 0 < delta < 1):
        raise InvalidParameterError(f"delta must be in (0, 1), for example 1e-5; got {delta!r}")
    check_temperature(temperature)
    if method == "dp-fusion":
        if (beta is None) == (epsilon is None):
            raise InvalidParameterError("DP-Fusion needs exactly one of beta= or epsilon= "
                                        "(epsilon per group, e.g. epsilon=8)")
        check_budget(beta, "beta")
        check_budget(epsilon, "epsilon")
        if temperature == 0:
            raise InvalidParameterError("temperature 0 (greedy decoding) gives no privacy guarantee; "
                                        "use temperature > 0, or method='original' for a greedy comparison")


def check_accounting(accounting: str, pace: float, method: str, beta: Budget) -> None:
    """DP-Fusion's accounting: ``"fixed"`` (every token charged the cap) or ``"filter"`` (each
    group's budget spent where its text matters), with a pace > 0 and epsilon targets."""
    if accounting not in ACCOUNTINGS:
        raise InvalidParameterError(f"accounting must be one of {ACCOUNTINGS}, got {accounting!r}")
    if not (is_number(pace) and pace > 0):
        raise InvalidParameterError(f"pace must be a number > 0 (the share of a group's budget per hidden token "
                                    f"that one token may spend), got {pace!r}")
    if accounting == "filter" and method == "dp-fusion" and beta is not None:
        raise InvalidParameterError("the filter accounting spends a budget per group: give epsilon= (beta= is the "
                                    "fixed accounting's per-token cap)")


def check_untrusted_accounting(accounting: str, method: str, chunks: int) -> None:
    """generate's untrusted chunks stay under the fixed accounting: the filter's proof is for a
    neighbour that hides a group, and a chunk's neighbour is any other chunk."""
    if accounting == "filter" and method == "dp-fusion" and chunks:
        raise InvalidParameterError(
            "the filter accounting covers span groups, whose neighbour hides the group; an untrusted chunk's "
            "neighbour is any other chunk, which its proof does not cover: use accounting='fixed' with untrusted "
            "chunks (docs/privacy.md, \"DP-Fusion with a per-group Rényi filter\")")


def default_new_tokens(document_tokens: int) -> int:
    """Sanitize's default T for a text of ``document_tokens`` tokens: 1.2x it + 16 (public)."""
    return math.ceil(1.2 * document_tokens) + 16


def check_new_tokens_fit(max_new_tokens: int | None, *, context: int | None, text: str,
                         passage_tokens: int | None) -> None:
    """Refuse, before anything loads, a T that no plan of ``text`` can fit in a model of
    ``context`` tokens (None: unknown, nothing checked). One passage writes at most context - 1
    tokens; cut into passages of at most ``passage_tokens`` (None: one passage), a document of L
    tokens has at most 2 L / passage_tokens + 1 of them (any two neighbours hold more than
    passage_tokens together), and no tokenizer writes more than two tokens a byte. Reads the
    text's length only."""
    if max_new_tokens is None or context is None:
        return
    passages = 1 if passage_tokens is None else 2 * (2 * len(text.encode("utf-8", "replace")) + 2) // passage_tokens + 1
    if max_new_tokens > passages * (context - 1):
        where = "in one passage" if passages == 1 else "in any passages of this document"
        raise InvalidParameterError(f"max_new_tokens {max_new_tokens} cannot fit the model's context of {context} "
                                    f"tokens {where}; ask for fewer tokens")


def check_tokens(name: str, value: int | None) -> None:
    """A token count: None (the default) or an integer >= 1."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InvalidParameterError(f"{name} must be an integer >= 1, got {value!r}")


def check_flag(name: str, value: Any) -> None:
    """A switch: True or False (not 0, 1 or a string, which would read as one silently)."""
    if not isinstance(value, bool):
        raise InvalidParameterError(f"{name} must be True or False, got {value!r}")


def per_group(value: Budget, names: Sequence[str], what: str) -> list[float]:
    """A scalar for every group, or a mapping that names each group of the document (names of
    groups the document lacks are ignored: a corpus-wide mapping is checked per document, so a
    document's result never depends on its batch)."""
    if isinstance(value, Mapping):
        missing = sorted(set(names) - set(value))
        if missing:
            raise InvalidInputError(f"{what} has no value for group(s) {missing}; give one per group")
        values = [value[n] for n in names]
    else:
        values = [value] * len(names)
    for n, v in zip(names, values):
        if not (is_number(v) and v >= 0):
            raise InvalidParameterError(f"{what} for group {n} must be a finite number >= 0, got {v!r}")
    return [float(v) for v in values]
