"""Releases of stored documents: a rewrite under the lifetime per-unit filter (docs/privacy.md,
"The vault: one lifetime filter per unit"; docs/vault.md).

A release of document D at a public epsilon e is DP-Fusion under the per-group Rényi filter
with ONE GROUP PER UNIT that has spans in D (:func:`tokendp.service.vault.units.unit_key`), at the
vault's order alpha: each group's row shows all of its unit's spans, whatever their labels. The
groups are named ``unit-001``, ``unit-002``... by the position of their first span (public), so
no subject id reaches the release. Each span is relabelled ``unit-00k/LABEL``
(:func:`tokendp.text.contexts.qualified_label`: hidden with LABEL's own placeholder, so a model
with typed markers sees the kind of each slot, as on the command line) and grouped by a label ->
group mapping, so that the library's own preparation (:func:`tokendp.jobs.sanitize.prepare_sanitize`)
builds the rows, passages, T and certificate.

The certificate is the release's own: each unit (e, delta)-DP for this release, from B_rel =
dp_fusion_filter_budget(e, alpha, delta), public; the lifetime guarantee (the tenant's epsilon)
is stated beside it. The filter then runs with each group's budget set to its unit's
RESERVATION r_u <= B_rel (:meth:`Release.use`), which depends on the ledger and never appears
in the release: the report is prepared, and checked, before the reservation exists.
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from tokendp.backends import HFBackend
from tokendp.errors import InvalidParameterError
from tokendp.fusion import PreparedFusion
from tokendp.jobs.config import SanitizeConfig
from tokendp.jobs.sanitize import prepare_sanitize
from tokendp.long_documents import TooFewTokens
from tokendp.service.keys import Caller
from tokendp.service.plans import AccountingMismatch, expected_certificates, report_certificate
from tokendp.service.vault.units import unit_key
from tokendp.service.vault.store import Settings, StoredDocument
from tokendp.text.contexts import qualified_label

REWRITE = "rewrite"
GROUP_PREFIX = "unit-"


@dataclass(frozen=True)
class RewriteParams:
    """A rewrite's public parameters; equal parameters on one document version share one
    stored release."""

    epsilon: float
    max_new_tokens: int | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon >= 0):
            raise InvalidParameterError(f"epsilon must be a finite number >= 0, got {self.epsilon!r}")

    def key(self) -> str:
        return json.dumps({"kind": REWRITE, "epsilon": float(self.epsilon), "max_new_tokens": self.max_new_tokens},
                          sort_keys=True)


@dataclass(frozen=True)
class RewriteRequest:
    """What a rewrite job carries: who asks, the stored document (as read), the parameters."""

    caller: Caller
    document: StoredDocument
    params: RewriteParams
    seed: int | None = None

    @property
    def id(self) -> str:
        return self.document.id

    @property
    def tokens(self) -> int | None:
        """T if the request fixes it (the quota counts it when the ticket is taken)."""
        return self.params.max_new_tokens

    def units(self) -> tuple[str, ...]:
        """The units the release reads, from the stored spans alone (its ticket holds them)."""
        return tuple(grouped_spans(self.document)[2].values())

    @property
    def record(self) -> StoredDocument:
        """What the release's row in the ledger records as read (its id and version)."""
        return self.document


def unit_groups(documents: Sequence[StoredDocument]
                ) -> tuple[list[list[dict[str, Any]]], dict[str, str], dict[str, str]]:
    """Each document's spans relabelled ``unit-00k/LABEL``, the label -> group mapping, and group
    -> unit key: ONE group per unit across ``documents``, numbered by the unit's first span
    (documents in the order given, spans by (start, end)), so a subject in several documents is
    one group whose row shows all of its spans. Numbers and partition are public; subject ids
    stay in the unit keys, which never leave the server."""
    names: dict[str, str] = {}  # unit key -> group name

    def unit(document: StoredDocument, span: Mapping[str, Any]) -> str:
        return unit_key(document.id, span["label"], span.get("subject") or document.subject)

    for document in documents:
        for span in sorted(document.spans, key=lambda s: (s["start"], s["end"])):
            names.setdefault(unit(document, span), f"{GROUP_PREFIX}{len(names) + 1:03d}")
    spans, groups = [], {}
    for document in documents:
        spans.append([])
        for span in document.spans:
            group = names[unit(document, span)]
            label = qualified_label(group, span["label"])
            spans[-1].append({"start": span["start"], "end": span["end"], "label": label})
            groups[label] = group
    return spans, groups, {g: u for u, g in names.items()}


def grouped_spans(document: StoredDocument) -> tuple[list[dict[str, Any]], dict[str, str], dict[str, str]]:
    """:func:`unit_groups` of one document: its spans, the label -> group mapping, group -> unit."""
    (spans,), groups, units = unit_groups([document])
    return spans, groups, units


@dataclass
class Release:
    """A rewrite ready to run: the prepared job (certificate fixed), the unit of each group in
    the job's group order, and B_rel. (An answer, :class:`tokendp.service.vault.ask.Answer`, is
    one too, with its own request and response.)"""

    kind: str
    request: Any  # RewriteRequest (or vault_ask.AskRequest)
    job: PreparedFusion
    units: tuple[str, ...]
    release_budget: float
    settings: Settings
    stored: ClassVar[bool] = True  # a finished release is cached per (document version, parameters)

    @property
    def tokens(self) -> int:
        """T, public: what the reader's token quota counts."""
        return self.job.documents[0].max_new_tokens

    def batch_key(self) -> tuple:
        return (self.kind, self.job.settings())

    def use(self, reserved: Mapping[str, float]) -> None:
        """Give each group its unit's reservation as its filter budget (the report keeps B_rel,
        and so do the weight ceilings: a unit's row costs the same whatever it has left)."""
        (doc,) = self.job.documents
        budgets = tuple(float(reserved[u]) for u in self.units)
        ceilings = doc.ceiling_budgets or doc.budgets
        self.job = dataclasses.replace(self.job, documents=(dataclasses.replace(doc, budgets=budgets,
                                                                                ceiling_budgets=ceilings),))

    def check(self, reserved: Mapping[str, float]) -> None:
        """Before the first token: the job about to run spends exactly the reservations the
        database holds, each within B_rel, one per unit of the document."""
        (doc,) = self.job.documents
        if set(reserved) != set(self.units) or doc.budgets != tuple(reserved[u] for u in self.units) \
                or any(not 0 <= r <= self.release_budget for r in reserved.values()):
            raise AccountingMismatch(f"{self.kind}: the job's budgets differ from the reservation")

    def verify(self, reports: list[dict[str, Any]]) -> None:
        """After generation: the report certifies exactly the prepared release."""
        if [report_certificate("sanitize", r) for r in reports] != expected_certificates("sanitize", self.job):
            raise AccountingMismatch(f"{self.kind}: the release's certificate differs from the prepared one")

    def response(self, result: Any) -> dict[str, Any]:
        """The release as a reader receives it (and as it is cached): the text, the report and
        the lifetime guarantee, all public."""
        return {"id": self.request.id, **result.to_dict(), "lifetime": self.lifetime(), "cached": False}

    def lifetime(self) -> dict[str, Any]:
        """The lifetime guarantee that bounds all releases about a unit together (public)."""
        tenant = self.request.caller.tenant
        return {"epsilon": tenant.budget, "delta": tenant.delta, "alpha": self.settings.alpha,
                "budget": self.settings.budget,
                "unit": "a subject (or a document and label) across every release of the vault"}


class LeastTokens:
    """The fewest tokens each stored document version can be rewritten with (its passages,
    :class:`~tokendp.long_documents.TooFewTokens`), learned when it is first planned, so that a
    request for fewer is refused before any planning: a reader cannot make the model's thread plan
    a long document again and again (docs/vault.md, "Releases"). Public: the passages are cut on the
    public row. The ``size`` most recent versions are kept."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._least: OrderedDict[tuple[str, str, str], int] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(request: RewriteRequest) -> tuple[str, str, str]:
        return request.caller.tenant.name, request.document.id, request.document.version

    def check(self, request: RewriteRequest) -> None:
        """Refuse a T below the document's known least, as planning would."""
        with self._lock:
            least = self._least.get(self.key(request))
        tokens = request.params.max_new_tokens
        if least is not None and tokens is not None and tokens < least:
            raise TooFewTokens.of(tokens, least)

    def learn(self, request: RewriteRequest, least: int) -> None:
        with self._lock:
            self._least[self.key(request)] = least
            self._least.move_to_end(self.key(request))
            while len(self._least) > self.size:
                self._least.popitem(last=False)


def plan_rewrite(request: RewriteRequest, backend: HFBackend, settings: Settings, *, max_tokens: int,
                 least: LeastTokens | None = None) -> Release:
    """Prepare a rewrite (every check before anything is reserved): the document's spans as
    unit groups, the filter at the vault's order with B_rel from epsilon, T within ``max_tokens``.
    With ``least``, a T below the document's known passages is refused first, and what planning
    finds is learned."""
    least = least or LeastTokens(0)
    least.check(request)
    spans, groups, units = grouped_spans(request.document)
    tenant = request.caller.tenant
    config = SanitizeConfig(method="dp-fusion", epsilon=request.params.epsilon, alpha=settings.alpha,
                            delta=tenant.delta, groups=groups, accounting="filter",
                            max_new_tokens=request.params.max_new_tokens)
    try:
        job = prepare_sanitize([request.document.text], spans=[spans], config=config, model=backend,
                               max_new_tokens_limit=max_tokens)
    except TooFewTokens as err:
        if err.least is not None:
            least.learn(request, err.least)
        raise
    (doc,) = job.documents
    least.learn(request, len(doc.long.passages) if doc.long else 1)
    order = tuple(units[g.name] for g in doc.context.groups)
    release_budget = max(doc.budgets, default=0.0)
    return Release(REWRITE, request, job, order, release_budget, settings)
