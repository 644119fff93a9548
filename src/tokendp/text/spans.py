"""The Span type: a labelled character range, like Presidio's RecognizerResult."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True, order=True)
class Span:
    """Characters ``text[start:end]`` (end exclusive) carry an entity of type ``label``."""

    start: int
    end: int
    label: str
    score: float = 1.0
    source: str = ""

    def __post_init__(self) -> None:
        if not (isinstance(self.start, int) and isinstance(self.end, int)):
            raise TypeError("Span start and end must be integers (character offsets)")
        if self.start < 0 or self.end <= self.start:
            raise ValueError(f"Span needs 0 <= start < end, got start={self.start}, end={self.end}")
        if not self.label:
            raise ValueError("Span label must be a non-empty string")

    def __len__(self) -> int:
        return self.end - self.start

    def overlaps(self, other: Span) -> bool:
        return self.start < other.end and other.start < self.end

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Span:
        return cls(int(d["start"]), int(d["end"]), str(d["label"]),
                   float(d.get("score", 1.0)), str(d.get("source", "")))
