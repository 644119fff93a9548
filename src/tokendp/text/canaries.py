"""Canaries (Carlini et al., "The Secret Sharer", USENIX Security 2019): random secrets planted in
a training corpus, so that how much a model memorised them can be measured as their exposure.

A canary is ``prefix`` followed by ``digits`` random digits joined by ``separator`` (default
"the secret number is 3 9 1 0 4 7", the paper's word-level format): with a space between the
digits, every common tokenizer reads each digit as its own token, which lets exposure rank the
canary against all 10^digits candidates exactly (:mod:`tokendp.eval.exposure`). Each canary is
inserted ``repeats`` times, each time as a record of its own, at positions drawn from ``seed``.
The secrets are synthetic (they carry nothing private), so the canary file stores them.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from tokendp.errors import InvalidInputError, InvalidParameterError

FORMAT = "tokendp.canaries/1"


@dataclass(frozen=True)
class CanaryFormat:
    """The template every canary of a run shares: prefix + digits joined by separator."""

    prefix: str = "the secret number is"
    digits: int = 6
    separator: str = " "

    def __post_init__(self) -> None:
        if isinstance(self.digits, bool) or not isinstance(self.digits, int) or not 1 <= self.digits <= 12:
            raise InvalidParameterError(f"canary digits must be an integer from 1 to 12, got {self.digits!r}")
        if not self.prefix.strip():
            raise InvalidParameterError("the canary prefix must not be empty")

    @property
    def space_size(self) -> int:
        """|R|: the number of possible secrets."""
        return 10**self.digits

    def text(self, secret: str) -> str:
        if len(secret) != self.digits or not secret.isdigit():
            raise InvalidParameterError(f"a secret must be {self.digits} digits")
        return f"{self.prefix} {self.separator.join(secret)}"


@dataclass(frozen=True)
class Canary:
    secret: str
    repeats: int


def make_canaries(count: int, *, repeats: int, seed: int, fmt: CanaryFormat = CanaryFormat()) -> list[Canary]:
    """``count`` distinct secrets drawn uniformly from the 10^digits candidates (seeded)."""
    for name, value in (("canaries", count), ("canary repeats", repeats)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidParameterError(f"{name} must be an integer >= 1, got {value!r}")
    if count > fmt.space_size:
        raise InvalidParameterError(f"{count} canaries do not fit in {fmt.space_size} possible secrets")
    draws = random.Random(seed).sample(range(fmt.space_size), count)
    return [Canary(f"{d:0{fmt.digits}d}", repeats) for d in draws]


def insert_canaries(texts: Sequence[str], canaries: Sequence[Canary], *, seed: int, fmt: CanaryFormat = CanaryFormat()) -> list[str]:
    """The corpus with every canary added ``repeats`` times, each copy a record of its own, at
    random positions (seeded); the original records keep their order."""
    planted = [fmt.text(c.secret) for c in canaries for _ in range(c.repeats)]
    out = list(texts)
    rng = random.Random(seed)
    for text in planted:
        out.insert(rng.randrange(len(out) + 1), text)
    return out


def write_canaries(path: str | Path, canaries: Sequence[Canary], fmt: CanaryFormat) -> Path:
    path = Path(path)
    data = {"format": FORMAT, **asdict(fmt), "canaries": [asdict(c) for c in canaries]}
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def read_canaries(path: str | Path) -> tuple[CanaryFormat, list[Canary]]:
    """The format and canaries of a file written by :func:`write_canaries`."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InvalidInputError(f"{path}: not a readable canary file ({type(err).__name__})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InvalidInputError(f"{path} is not a tokendp canary file (expected format {FORMAT!r})")
    try:
        fmt = CanaryFormat(str(data["prefix"]), int(data["digits"]), str(data["separator"]))
        canaries = [Canary(str(c["secret"]), int(c["repeats"])) for c in data["canaries"]]
        for c in canaries:
            fmt.text(c.secret)
    except (KeyError, TypeError, ValueError, InvalidParameterError) as err:
        raise InvalidInputError(f"{path}: malformed canary file ({type(err).__name__})") from None
    if not canaries:
        raise InvalidInputError(f"{path} holds no canaries")
    return fmt, canaries
