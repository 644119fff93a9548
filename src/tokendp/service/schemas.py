"""Request bodies of the /v1 API (pydantic): they mirror the Python API and the CLI's --json.

Only what the service can account for is accepted: DP-Fusion groups are always one per span
label (``groups="by-label"``), so a unit's group is the label the client gave its spans.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tokendp.params import DEFAULT_PACE

Id = Field(min_length=1, max_length=200, description="the protected document's id, chosen by the client")
Budget = float | dict[str, float] | None


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SpanIn(Strict):
    start: int = Field(ge=0)
    end: int = Field(gt=0)
    label: str = Field(min_length=1, max_length=64)


class TagRequest(Strict):
    text: str = Field(min_length=1)


class Accounting(Strict):
    """DP-Fusion's accounting of the span groups (docs/privacy.md): a request reserves each
    group's epsilon, computed from public parameters, under either."""

    accounting: Literal["fixed", "filter"] = Field("fixed", description="DP-Fusion's accounting: every token "
                                                   "charged the cap (fixed) or each group's budget spent where its "
                                                   "text matters (filter, needs epsilon)")
    pace: float = Field(DEFAULT_PACE, ge=1, description="with the filter: the most one token may spend, as a multiple of "
                                               "the fixed accounting's per-token cap")


class SanitizeRequest(Accounting):
    id: str = Id
    text: str = Field(min_length=1)
    spans: list[SpanIn] | None = Field(None, description="character spans; omitted: the server's tagger")
    labels: list[str] | None = Field(None, max_length=32, description="the labels to protect (omitted: every "
                                     "label not kept); with labels, every label of the spans must be in labels or "
                                     "keep, or the request is refused before anything is charged")
    keep: list[str] | None = Field(None, max_length=32, description="labels released as plain text, NOT protected")
    passage_tokens: int | None = Field(320, ge=16, description="a longer document is rewritten passage by "
                                                               "passage, one certificate for the whole; null: one "
                                                               "passage")
    method: Literal["dp-fusion", "public"] = "dp-fusion"
    epsilon: Budget = Field(None, description="per group: one number, or {label: epsilon}")
    beta: Budget = None
    alpha: float | None = Field(None, gt=1)
    delta: float = Field(1e-5, gt=0, lt=1)
    max_new_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(0.7, gt=0)  # tokendp.sanitize's default (docs/sanitize.md, "Choosing the temperature")
    seed: int | None = None
    stream: bool = False


class GenerateRequest(Accounting):
    id: str = Id
    prompt: str = Field(min_length=1)
    context: str = Field(min_length=1, description="the trusted document whose groups are charged")
    spans: list[SpanIn] | None = None
    untrusted: list[str] = Field(default_factory=list)
    method: Literal["dp-fusion", "public"] = "dp-fusion"
    epsilon: Budget = None
    beta: Budget = None
    alpha: float | None = Field(None, gt=1)
    delta: float = Field(1e-5, gt=0, lt=1)
    max_new_tokens: int = Field(128, ge=1)
    temperature: float = Field(0.7, gt=0)
    seed: int | None = None


class SynthesizeRequest(Strict):
    id: str = Field(min_length=1, max_length=200, description="the reference set's id (the protected unit)")
    references: list[str] = Field(min_length=1)
    method: Literal["invisibleink", "amin"] = "invisibleink"
    epsilon: float = Field(ge=0)
    delta: float = Field(1e-5, gt=0, lt=1)
    batch_size: int = Field(ge=1)
    max_tokens: int = Field(ge=1)
    temperature: float = Field(1.0, gt=0)
    top_k: int | None = Field(100, ge=1)
    num: int | None = Field(None, ge=1)
    domain: str | None = Field(None, max_length=200)
    seed: int | None = None


class AccountRequest(Strict):
    method: Literal["dp-fusion", "invisibleink", "amin"] = "dp-fusion"
    alpha: float = Field(2.0, gt=1)
    beta: float | None = Field(None, ge=0)
    epsilon: float | None = Field(None, ge=0)
    groups: int = Field(1, ge=1)
    max_tokens: int = Field(ge=1)
    delta: float = Field(1e-5, gt=0, lt=1)
    batch_size: int = Field(1, ge=1)
    temperature: float = Field(1.0, gt=0)
    clip: float | None = Field(None, ge=0)


# ---------------------------------------------------------------------------- the vault (docs/vault.md)
Subject = Field(None, min_length=1, max_length=200, description="the person this is about: the owner's id, never "
                "shown to readers; spans of one subject share one lifetime budget across documents")


class VaultSpanIn(Strict):
    start: int = Field(ge=0)
    end: int = Field(gt=0)
    label: str = Field(min_length=1, max_length=64, description="one of tokendp's labels (PERSON, CODE, LOC, ORG, "
                       "DEM, OCCUPATION, DATE, DURATION, DATETIME, QUANTITY, MISC)")
    subject: str | None = Subject


class DocumentBody(Strict):
    title: str = Field("", max_length=200, description="PUBLIC: every reader of the tenant sees it")
    text: str = Field(min_length=1, description="private: only owner keys read it back")
    spans: list[VaultSpanIn] | None = Field(None, description="character offsets into text as given; omitted: the "
                                            "server's tagger finds them and the document is a draft until confirmed")
    subject: str | None = Subject


class DocumentIn(DocumentBody):
    id: str = Field(min_length=1, max_length=200, description="the document's id, chosen by the owner (readers "
                    "see it)")


class QuotaIn(Strict):
    releases_per_day: int | None = Field(None, ge=0, description="fresh releases per 24 hours (null: no limit)")
    tokens_per_day: int | None = Field(None, ge=0, description="T summed over fresh releases per 24 hours")


MAX_ASK_DOCUMENTS = 8  # the most documents one answer reads (named, or top_k)
DEFAULT_TOP_K = 3


class AskIn(Strict):
    question: str = Field(min_length=1, max_length=2000, description="PUBLIC: the reader's question (never stored)")
    documents: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        None, min_length=1, max_length=MAX_ASK_DOCUMENTS, json_schema_extra={"uniqueItems": True},
        description="the confirmed documents to read, in this order; omitted: the top_k documents whose PUBLIC "
                    "versions (every span hidden) best match the question (BM25)")
    top_k: int | None = Field(None, ge=1, le=MAX_ASK_DOCUMENTS, description=f"how many documents retrieval reads "
                              f"(default {DEFAULT_TOP_K}); only without documents")
    epsilon: float = Field(ge=0, description="each unit's epsilon for this answer (at the tenant's delta); the "
                           "lifetime budget bounds all releases together")
    max_new_tokens: int | None = Field(None, ge=1, description="T (default: 128, or the server's limit if lower)")
    temperature: float = Field(0.7, gt=0)
    seed: int | None = Field(None, description="owner keys only: the guarantee holds against whoever does not know "
                             "the seed")
    stream: bool = Field(False, description="server-sent events (or Accept: text/event-stream)")

    @field_validator("documents")
    @classmethod
    def _distinct(cls, ids: list[str] | None) -> list[str] | None:
        if ids is not None and len(set(ids)) != len(ids):
            raise ValueError("document ids must be distinct")
        return ids
