"""Answers from stored documents (``POST /v1/ask``): ``tokendp generate``'s mechanism under the
vault's lifetime per-unit filter (docs/privacy.md, "Asking the vault: retrieval from public
versions"; docs/vault.md, "Asking").

An answer reads a PUBLIC list of confirmed documents (named by the reader, or retrieved from
their public versions: :mod:`tokendp.service.vault.retrieval`) and answers the reader's question with
DP-Fusion under the per-group Rényi filter, with ONE GROUP PER UNIT that has spans in any of
them (:func:`tokendp.service.vault.unit_groups`): a subject in several documents is one group,
whose row shows its spans in all of them, reserved once and charged once per answer. Each
document's text outside its spans is in every row, as in ``tokendp generate``.

Everything else is a rewrite's (:class:`tokendp.service.vault.Release`): B_rel is the filter
budget of the public epsilon at the vault's order, in the certificate; the filter runs with
each group's budget set to its unit's reservation r_u <= B_rel; the certificate is prepared,
and checked, before the reservation exists, and the reservation is checked before the first
token. Answers are not stored: a question is not a document, and an answer is returned to the
reader who asked only.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from tokendp.backends import HFBackend
from tokendp.errors import InvalidParameterError
from tokendp.jobs.generate import prepare_generate
from tokendp.service.keys import Caller
from tokendp.service.vault.release import Release, unit_groups
from tokendp.service.vault.store import Settings, StoredDocument

ASK = "ask"


@dataclass(frozen=True)
class AskParams:
    """An answer's public parameters: each unit's epsilon for this release, T, the temperature."""

    epsilon: float
    max_new_tokens: int
    temperature: float = 0.7

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon >= 0):
            raise InvalidParameterError(f"epsilon must be a finite number >= 0, got {self.epsilon!r}")

    def key(self) -> str:
        """As the release's row records them (the question is not stored)."""
        return json.dumps({"kind": ASK, "epsilon": float(self.epsilon), "max_new_tokens": self.max_new_tokens,
                           "temperature": float(self.temperature)}, sort_keys=True)


@dataclass(frozen=True)
class Read:
    """What an answer's row in the ledger records as read: the documents' ids and versions."""

    id: str
    version: str


@dataclass(frozen=True)
class AskRequest:
    """What an answer's job carries: who asks, the question, the documents it reads (as read, in
    the public order: named, or best first) and the parameters; ``seed`` only from an owner."""

    caller: Caller
    question: str
    documents: tuple[StoredDocument, ...]
    params: AskParams
    seed: int | None = None

    @property
    def record(self) -> Read:
        return Read(json.dumps([d.id for d in self.documents], ensure_ascii=False),
                    json.dumps([d.version for d in self.documents]))

    @property
    def tokens(self) -> int:
        """T, fixed by the request (the quota counts it when the ticket is taken)."""
        return self.params.max_new_tokens

    def units(self) -> tuple[str, ...]:
        """The units the answer reads, from the documents' stored spans (its ticket holds them)."""
        return tuple(unit_groups(self.documents)[2].values())


class Answer(Release):
    """An answer ready to run: a :class:`~tokendp.service.vault.Release` of a generate job,
    never stored (module docstring)."""

    stored = False

    def response(self, result: Any) -> dict[str, Any]:
        """The answer as the reader receives it: the text, the certificate, the ids of the
        documents read and the lifetime guarantee, all public."""
        return {"text": result.text, "report": result.report.to_dict(),
                "documents": [d.id for d in self.request.documents], "lifetime": self.lifetime()}


def plan_ask(request: AskRequest, backend: HFBackend, settings: Settings, *, max_tokens: int) -> Answer:
    """Prepare an answer (every check before anything is reserved): one group per unit across
    the documents, the filter at the vault's order with B_rel from epsilon, T within ``max_tokens``."""
    params = request.params
    if params.max_new_tokens > max_tokens:
        raise InvalidParameterError(f"max_new_tokens {params.max_new_tokens} is above this server's limit of "
                                    f"{max_tokens}; ask for fewer tokens")
    spans, groups, units = unit_groups(request.documents)
    job = prepare_generate([request.question], context=[[d.text for d in request.documents]], spans=[spans],
                           model=backend, method="dp-fusion", alpha=settings.alpha, epsilon=params.epsilon,
                           delta=request.caller.tenant.delta, groups=groups, max_new_tokens=params.max_new_tokens,
                           temperature=params.temperature, accounting="filter")
    (doc,) = job.documents
    order = tuple(units[g.name] for g in doc.context.groups)
    return Answer(ASK, request, job, order, max(doc.budgets, default=0.0), settings)
