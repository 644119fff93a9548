"""Request bodies of the /v1 API (pydantic): they mirror the Python API and the CLI's --json.

Only what the service can account for is accepted: DP-Fusion groups are always one per span
label (``groups="by-label"``), so a unit's group is the label the client gave its spans.

The schemas state every rule the server enforces that JSON Schema can state (the OpenAPI
document, docs/service.md, "The OpenAPI contract"). A rule on one field is checked here (422
invalid_request). A rule across fields (:func:`exactly_one` of epsilon or beta) is stated in the
model's JSON schema and checked by the library (400 invalid_parameter), as is a bound
that is the server's own option: such a field is marked ``{"x-limit": option}`` and
:func:`tokendp.service.contract.state_limits` writes the server's value in its place. What JSON
Schema cannot state (a span inside its text, a document within the model's context, an epsilon
above what converting RDP at delta costs) is answered 400, as the OpenAPI document's 400 says.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tokendp.params import DEFAULT_PACE, MAX_ALPHA, MIN_TEMPERATURE
from tokendp.service.vault.units import CONTROLS, FORMAT_RANGES, WHITE_SPACE
from tokendp.text.taggers.labels import CHOOSABLE

# Python's whitespace (str.isspace, what str.strip() removes), as a regular expression class's body.
WHITESPACE = r"\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
#: Some text that is not whitespace: ``text.strip()`` is not empty.
NOT_BLANK = f"[^{WHITESPACE}]"
#: A document's text: not blank once its leading byte order marks are removed (``text.lstrip(BOM).strip()``).
DOCUMENT_TEXT = rf"^\ufeff*(?:[^{WHITESPACE}\ufeff]|[{WHITESPACE}]+[^{WHITESPACE}])"
#: A vault document's text, which the database stores: DOCUMENT_TEXT, and no NUL (PostgreSQL cannot store it).
STORED_TEXT = rf"^\ufeff*(?:[^{WHITESPACE}\ufeff\x00]|[{WHITESPACE}]+[^{WHITESPACE}\x00])[^\x00]*$"
#: A vault document id (part of a URL): no '/', no control character.
DOCUMENT_ID = r"^[^/\x00-\x1f]+$"
#: Any other id (a request's document, a unit's in /v1/budget): no control character.
PLAIN_ID = r"^[^\x00-\x1f]+$"
#: A key's prefix, as `tokendp keys list` shows it.
KEY_PREFIX = r"^[A-Za-z0-9_-]+$"
#: A text the database stores (a vault document's title): no NUL, which PostgreSQL cannot store.
NO_NUL = r"^[^\x00]*$"
#: The most tokens (T) any request may name: the server's --max-new-tokens is at most this, so
#: every T the database records fits its INTEGER column (32 bits on PostgreSQL).
MAX_NEW_TOKENS = 1_000_000
#: The largest count a quota may hold (PostgreSQL's INTEGER).
MAX_COUNT = 2**31 - 1


def _class(points: set[int]) -> str:
    """A regular expression class's body for the code points ``points``, in ranges: ``\\xNN`` and
    ``\\uXXXX`` escapes, astral code points as themselves."""
    def one(c: int) -> str:
        return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" if c < 0x10000 else chr(c)
    out, ordered = [], sorted(points)
    for c in ordered:
        if out and c == out[-1][1] + 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return "".join(one(a) if a == b else f"{one(a)}-{one(b)}" for a, b in out)


_CONTROLS = _class({ord(c) for c in CONTROLS})
_IGNORED = _class({ord(c) for c in CONTROLS + "".join(WHITE_SPACE)} | {c for a, b in FORMAT_RANGES for c in range(a, b + 1)})
#: A subject id: no control character but white space, and something left once white space and
#: format characters are removed (:func:`tokendp.service.vault.units.canonical_subject`).
SUBJECT = f"^[^{_CONTROLS}]*[^{_IGNORED}][^{_CONTROLS}]*$"


Id = Field(min_length=1, max_length=200, pattern=PLAIN_ID, description="the protected document's id, chosen by the "
           "client: no control character")
Epsilon = Annotated[float, Field(ge=0)]
Budget = Epsilon | dict[str, Epsilon] | None
Alpha = Field(None, gt=1, le=MAX_ALPHA, description="the Renyi order (omitted: chosen from the request's targets)")


def limit(option: str) -> dict[str, str]:
    """The JSON schema marker of a field bounded by the server's ``option`` (a :class:`Limits` field)."""
    return {"x-limit": option}


def given(*names: str) -> dict[str, Any]:
    """JSON schema: every field of ``names`` is present and not null."""
    return {"properties": {n: {"not": {"type": "null"}} for n in names}, "required": list(names)}


def exactly_one(*names: str) -> dict[str, Any]:
    """JSON schema: exactly one of ``names`` is given (the library's "exactly one of beta or epsilon")."""
    return {"oneOf": [given(n) for n in names]}


PUBLIC = {"properties": {"method": {"const": "public"}}, "required": ["method"]}  # reads no span: no budget
ONE_BUDGET = {"anyOf": [PUBLIC, exactly_one("epsilon", "beta")]}
NOT_PUBLIC = {"method": {"not": {"const": "public"}}}
# The filter accounting spends an epsilon per group: beta (the fixed accounting's cap) is refused with it.
FILTER_TAKES_EPSILON = {"not": {"properties": {"accounting": {"const": "filter"}, **given("beta")["properties"],
                                               **NOT_PUBLIC}, "required": ["accounting", "beta"]}}


class Strict(BaseModel):
    """Unknown fields are refused, and so is a JSON boolean anywhere but a boolean field (pydantic's
    lax mode would read true and false as the numbers 1 and 0)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_boolean_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, value in data.items():
                field = cls.model_fields.get(name)
                values = value.values() if isinstance(value, dict) else [value]
                if field is not None and field.annotation is not bool and any(isinstance(v, bool) for v in values):
                    raise ValueError(f"{name} takes no boolean (true or false is not a number)")
        return data


class SpanIn(Strict):
    start: int = Field(ge=0)
    end: int = Field(gt=0)
    label: str = Field(min_length=1, max_length=64, pattern=PLAIN_ID)


class TagRequest(Strict):
    text: str = Field(min_length=1, json_schema_extra=limit("max_tag_chars"))


class Accounting(Strict):
    """DP-Fusion's accounting of the span groups (docs/privacy.md): a request reserves each
    group's epsilon, computed from public parameters, under either."""

    accounting: Literal["fixed", "filter"] = Field("fixed", description="DP-Fusion's accounting: every token "
                                                   "charged the cap (fixed) or each group's budget spent where its "
                                                   "text matters (filter, needs epsilon)")
    pace: float = Field(DEFAULT_PACE, gt=0, description="with the filter: one token may spend at most pace * B / n "
                                                        "of a group's budget B, n the tokens it hides")


class SanitizeRequest(Accounting):
    model_config = ConfigDict(json_schema_extra={"allOf": [ONE_BUDGET, FILTER_TAKES_EPSILON]})

    id: str = Id
    text: str = Field(min_length=1, pattern=DOCUMENT_TEXT)
    spans: list[SpanIn] | None = Field(None, description="character spans; omitted: the server's tagger")
    labels: list[str] | None = Field(None, max_length=32, json_schema_extra={"contains": {"pattern": NOT_BLANK}},
                                     description="the labels to protect (omitted: every label not kept); with labels, "
                                     "every label of the spans must be in labels or keep, or the request is refused "
                                     "before anything is charged")
    keep: list[str] | None = Field(None, max_length=32, description="labels released as plain text, NOT protected")
    passage_tokens: int | None = Field(320, ge=16, description="a longer document is rewritten passage by "
                                                               "passage, one certificate for the whole; null: one "
                                                               "passage")
    method: Literal["dp-fusion", "public"] = "dp-fusion"
    epsilon: Budget = Field(None, description="per group: one number, or {label: epsilon}; exactly one of epsilon "
                            "and beta (dp-fusion)")
    beta: Budget = None
    alpha: float | None = Alpha
    delta: float = Field(1e-5, gt=0, lt=1)
    max_new_tokens: int | None = Field(None, ge=1, le=MAX_NEW_TOKENS, json_schema_extra=limit("max_new_tokens"))
    temperature: float = Field(0.7, ge=MIN_TEMPERATURE)  # tokendp.sanitize's default (docs/sanitize.md)
    seed: int | None = None
    stream: bool = False


class GenerateRequest(Accounting):
    model_config = ConfigDict(json_schema_extra={"allOf": [
        ONE_BUDGET, FILTER_TAKES_EPSILON,
        # the filter's proof is for a neighbour that hides a group; untrusted chunks take the fixed accounting
        {"not": {"properties": {"accounting": {"const": "filter"}, "untrusted": {"minItems": 1}, **NOT_PUBLIC},
                 "required": ["accounting", "untrusted"]}}]})

    id: str = Id
    prompt: str = Field(min_length=1, pattern=NOT_BLANK)
    context: str = Field(min_length=1, pattern=NOT_BLANK, description="the trusted document whose groups are "
                         "charged")
    spans: list[SpanIn] | None = None
    untrusted: list[Annotated[str, Field(pattern=NOT_BLANK)]] = Field(default_factory=list)
    method: Literal["dp-fusion", "public"] = "dp-fusion"
    epsilon: Budget = None
    beta: Budget = None
    alpha: float | None = Alpha
    delta: float = Field(1e-5, gt=0, lt=1)
    max_new_tokens: int | None = Field(None, ge=1, le=MAX_NEW_TOKENS, json_schema_extra=limit("max_new_tokens"),
                                       description="T (default: 128, or the server's limit if lower)")
    temperature: float = Field(0.7, ge=MIN_TEMPERATURE)
    seed: int | None = None


class SynthesizeRequest(Strict):
    id: str = Field(min_length=1, max_length=200, pattern=PLAIN_ID, description="the reference set's id (the "
                    "protected unit): no control character")
    references: list[Annotated[str, Field(min_length=1, pattern=NOT_BLANK)]] = Field(min_length=1)
    method: Literal["invisibleink", "amin"] = "invisibleink"
    epsilon: float = Field(ge=0)
    delta: float = Field(1e-5, gt=0, lt=1)
    batch_size: int = Field(ge=1)
    max_tokens: int = Field(ge=1, le=MAX_NEW_TOKENS, json_schema_extra=limit("max_new_tokens"))
    temperature: float = Field(1.0, ge=MIN_TEMPERATURE)
    top_k: int | None = Field(100, ge=1)
    num: int | None = Field(None, ge=1)
    domain: str | None = Field(None, max_length=200)
    seed: int | None = None


class AccountRequest(Strict):
    # dp-fusion: exactly one of beta and epsilon; invisibleink and amin: exactly one of clip and epsilon.
    model_config = ConfigDict(json_schema_extra={"anyOf": [
        {"properties": {"method": {"const": "dp-fusion"}}, **exactly_one("beta", "epsilon")},
        {"properties": {"method": {"enum": ["invisibleink", "amin"]}}, "required": ["method"],
         **exactly_one("clip", "epsilon")}]})

    method: Literal["dp-fusion", "invisibleink", "amin"] = "dp-fusion"
    alpha: float = Field(2.0, gt=1, le=MAX_ALPHA)
    beta: float | None = Field(None, ge=0)
    epsilon: float | None = Field(None, gt=0, description="a target to calibrate beta or clip to")
    groups: int = Field(1, ge=1)
    max_tokens: int = Field(ge=1)
    delta: float = Field(1e-5, gt=0, lt=1)
    batch_size: int = Field(1, ge=1)
    temperature: float = Field(1.0, ge=MIN_TEMPERATURE)
    clip: float | None = Field(None, ge=0)


# ---------------------------------------------------------------------------- the vault (docs/vault.md)
Subject = Field(None, min_length=1, max_length=200, pattern=SUBJECT,
                description="the person this is about: the owner's id, never shown to readers; spans of one subject "
                "share one lifetime budget across documents. Stored canonical (Unicode NFKC, case folded, white "
                "space trimmed and collapsed, invisible characters removed): ids that differ only there are one "
                "subject")


class VaultSpanIn(Strict):
    start: int = Field(ge=0)
    end: int = Field(gt=0)
    label: Literal[CHOOSABLE] = Field(description="one of tokendp's labels")
    subject: str | None = Subject


class DocumentBody(Strict):
    # Without spans the server's tagger reads the text, which takes at most --max-tag-chars characters (413).
    model_config = ConfigDict(json_schema_extra={"anyOf": [
        {"properties": {"spans": {"type": "array"}}, "required": ["spans"]},
        {"properties": {"text": {"type": "string", **limit("max_tag_chars")}}}]})

    title: str = Field("", max_length=200, pattern=NO_NUL, description="PUBLIC: every reader of the tenant sees it")
    text: str = Field(min_length=1, pattern=STORED_TEXT, description="private: only owner keys read it back")
    spans: list[VaultSpanIn] | None = Field(None, description="character offsets into text as given; omitted: the "
                                            "server's tagger finds them and the document is a draft until confirmed")
    subject: str | None = Subject


class DocumentIn(DocumentBody):
    id: str = Field(min_length=1, max_length=200, pattern=DOCUMENT_ID, description="the document's id, chosen by "
                    "the owner (readers see it): no '/', no control character")


class QuotaIn(Strict):
    releases_per_day: int | None = Field(None, ge=0, le=MAX_COUNT, description="fresh releases per 24 hours (null: "
                                         "no limit)")
    tokens_per_day: int | None = Field(None, ge=0, le=MAX_COUNT, description="T summed over fresh releases per 24 "
                                       "hours")


MAX_ASK_DOCUMENTS = 8  # the most documents one answer reads (named, or top_k)
DEFAULT_TOP_K = 3


class AskIn(Strict):
    # documents (the ones to read) or top_k (how many to retrieve), not both
    model_config = ConfigDict(json_schema_extra={"not": {
        "properties": {"documents": {"type": "array"}, "top_k": {"type": "integer"}},
        "required": ["documents", "top_k"]}})

    question: str = Field(min_length=1, max_length=2000, description="PUBLIC: the reader's question (never stored)")
    documents: list[Annotated[str, Field(min_length=1, max_length=200, pattern=DOCUMENT_ID)]] | None = Field(
        None, min_length=1, max_length=MAX_ASK_DOCUMENTS, json_schema_extra={"uniqueItems": True},
        description="the confirmed documents to read, in this order; omitted: the top_k documents whose PUBLIC "
                    "versions (every span hidden) best match the question (BM25)")
    top_k: int | None = Field(None, ge=1, le=MAX_ASK_DOCUMENTS, description=f"how many documents retrieval reads "
                              f"(default {DEFAULT_TOP_K}); only without documents")
    epsilon: float = Field(ge=0, description="each unit's epsilon for this answer (at the tenant's delta); the "
                           "lifetime budget bounds all releases together")
    max_new_tokens: int | None = Field(None, ge=1, le=MAX_NEW_TOKENS, json_schema_extra=limit("max_new_tokens"),
                                       description="T (default: 128, or the server's limit if lower)")
    temperature: float = Field(0.7, ge=MIN_TEMPERATURE)
    seed: int | None = Field(None, description="owner keys only: the guarantee holds against whoever does not know "
                             "the seed")
    stream: bool = Field(False, description="server-sent events (or Accept: text/event-stream)")

    @field_validator("documents")
    @classmethod
    def _distinct(cls, ids: list[str] | None) -> list[str] | None:
        if ids is not None and len(set(ids)) != len(ids):
            raise ValueError("document ids must be distinct")
        return ids
