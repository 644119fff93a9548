"""Plans: what a request will cost each protected unit, fixed before anything is generated.

A plan is the request's prepared job and the charges read off it. The job is prepared by the
library's own code (:func:`tokendp.jobs.sanitize.prepare_sanitize`,
:func:`tokendp.jobs.generate.prepare_generate`, a :class:`tokendp.jobs.synthesize.Synthesizer` with its
reference batches), which checks every parameter, tags, builds the rows and fixes each group's
certificate; the charges come from that same prepared job, group by group, and the worker runs
exactly that job. So a group the job reads is a group the reservation charges, and a request that
would be refused for its input is refused here, before anything is reserved.

Before the first token :meth:`Plan.check` recomputes the charges from the job about to run and
compares them with the reservation as the store recorded it; after generation :meth:`Plan.verify`
compares every report with the prepared certificate. Either difference withholds the output.

Charges (docs/service.md, "Budget semantics"):

* sanitize and generate (DP-Fusion, m groups, T tokens): unit (id, group i) gets the RDP bound
  T r_i at alpha (:meth:`tokendp.fusion.PreparedDocument.rdp`). Untrusted chunks of generate
  are groups too (they count in m) but no person's budget: their per-request bound limits their
  influence and is reported, not charged. Which groups are chunks is marked by the code that
  builds their rows (:class:`tokendp.text.contexts.GroupInfo`), never read from a name, and no
  span label may take a chunk's name (``untrusted-``, any case, is refused).
* ``method="public"``: the output reads no group, nothing is charged.
* synthesize (InvisibleInk or Amin et al., T tokens, B references per text): unit
  (reference set id, "references") gets rho = T rho_tok(C) zCDP, C calibrated from epsilon;
  each reference is read by one text only, so that is every reference's cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tokendp.backends import HFBackend
from tokendp.errors import InvalidParameterError
from tokendp.fusion import PreparedFusion, reported_alpha
from tokendp.jobs.generate import DEFAULT_MAX_NEW_TOKENS, prepare_generate
from tokendp.jobs.config import SanitizeConfig
from tokendp.jobs.sanitize import prepare_sanitize
from tokendp.service.composition import Charge
from tokendp.service.schemas import GenerateRequest, SanitizeRequest, SynthesizeRequest
from tokendp.jobs.synthesize import ReferenceBatch, Synthesizer, reference_batches

SYNTHESIS_GROUP = "references"
Unit = tuple[str, str]  # (document id, privacy group)


class AccountingMismatch(Exception):
    """A job's certificate differs from its reservation: the output is withheld."""


@dataclass(frozen=True)
class PreparedSynthesis:
    """A synthesize request ready to run: the synthesizer (calibrated) and its reference batches."""

    synthesizer: Synthesizer
    batches: tuple[ReferenceBatch, ...]


@dataclass
class Plan:
    """A request, its prepared job and the charges read off that job."""

    kind: str
    request: Any
    job: PreparedFusion | PreparedSynthesis
    charges: dict[Unit, Charge]

    def batch_key(self) -> tuple | None:
        """Requests with equal keys may share a batch; None: run alone. Sanitize jobs with equal
        settings share one (each document keeps its own certificate, T, alpha, seed and random
        stream: docs/service.md, "Batching")."""
        return self.job.settings() if self.kind == "sanitize" else None

    def check(self, reserved: Mapping[Unit, Charge]) -> None:
        """Before the first token: the job about to run charges exactly what was reserved."""
        if charges_of(self.kind, self.request.id, self.job) != dict(reserved):
            raise AccountingMismatch(f"{self.kind} request: the job's charges differ from the reservation")

    def verify(self, reports: list[dict[str, Any]]) -> None:
        """After generation: every report certifies exactly the prepared job."""
        if [report_certificate(self.kind, r) for r in reports] != expected_certificates(self.kind, self.job):
            raise AccountingMismatch(f"{self.kind} request: the job's certificate differs from the reservation")


def charges_of(kind: str, document: str, job: PreparedFusion | PreparedSynthesis) -> dict[Unit, Charge]:
    """What a prepared job charges each unit (module docstring)."""
    if kind == "synthesize":
        return {(document, SYNTHESIS_GROUP): Charge("zcdp", job.synthesizer.rho)}
    if job.method == "public":
        return {}
    (doc,) = job.documents
    return {(document, info.name): Charge("rdp", value, doc.alpha)
            for info, value in zip(doc.context.groups, doc.rdp()) if not info.untrusted}


def expected_certificates(kind: str, job: PreparedFusion | PreparedSynthesis) -> list[tuple]:
    """What each report of the job must certify: (alpha, delta, T, (group, beta, epsilon)...)
    per document, or (epsilon, clip, delta, T, B) per synthetic text."""
    if kind == "synthesize":
        s = job.synthesizer
        return [(s.certified, s.clip, s.delta, s.max_tokens, s.batch_size)] * len(job.batches)
    return [(reported_alpha(job.method, d), job.delta, d.max_new_tokens,
             tuple((g.label, g.beta, g.epsilon) for g in d.groups)) for d in job.documents]


def report_certificate(kind: str, report: dict[str, Any]) -> tuple:
    """What a report certifies, in the shape of :func:`expected_certificates`."""
    if kind == "synthesize":
        return tuple(report.get(k) for k in ("epsilon", "clip", "delta", "max_tokens", "batch_size"))
    rows = [*report.get("groups", ()), *report.get("untrusted", ())]  # span groups, then chunks: the prepared order
    return (report.get("alpha"), report.get("delta"), report.get("max_new_tokens"),
            tuple((g.get("label", g.get("name")), g.get("beta"), g.get("epsilon_certified", g.get("epsilon")))
                  for g in rows))


def _fusion_options(req: SanitizeRequest | GenerateRequest) -> dict[str, Any]:
    private = req.method != "public"
    return dict(method=req.method, alpha=req.alpha if private else None, beta=req.beta if private else None,
                epsilon=req.epsilon if private else None, delta=req.delta, temperature=req.temperature,
                groups="by-label", accounting=req.accounting, pace=req.pace)


def _spans(spans: list | None) -> list[dict] | None:
    return None if spans is None else [s.model_dump() for s in spans]


def plan_sanitize(req: SanitizeRequest, backend: HFBackend, tagger: Any, *, max_tokens: int) -> Plan:
    """One /v1/sanitize request: T given (at most ``max_tokens``) or 1.2x the document + 16."""
    config = SanitizeConfig(labels=req.labels, keep=req.keep, max_new_tokens=req.max_new_tokens,
                            passage_tokens=req.passage_tokens, **_fusion_options(req))
    job = prepare_sanitize([req.text], spans=[_spans(req.spans)], config=config, tagger=tagger, model=backend,
                           max_new_tokens_limit=max_tokens)
    return Plan("sanitize", req, job, charges_of("sanitize", req.id, job))


def plan_generate(req: GenerateRequest, backend: HFBackend, tagger: Any, *, max_tokens: int) -> Plan:
    """One /v1/generate request: the context document's span groups are charged. T given (at
    most ``max_tokens``), or the library's default if this server allows that many, else ``max_tokens``."""
    tokens = min(DEFAULT_MAX_NEW_TOKENS, max_tokens) if req.max_new_tokens is None else req.max_new_tokens
    _check_tokens("max_new_tokens", tokens, max_tokens)
    job = prepare_generate([req.prompt], context=[req.context], spans=[_spans(req.spans)], untrusted=[req.untrusted],
                           tagger=tagger, model=backend, max_new_tokens=tokens, **_fusion_options(req))
    return Plan("generate", req, job, charges_of("generate", req.id, job))


def plan_synthesize(req: SynthesizeRequest, backend: HFBackend, *, max_tokens: int) -> Plan:
    """One /v1/synthesize request: rho = T rho_tok(C) per reference of the set."""
    _check_tokens("max_tokens", req.max_tokens, max_tokens)
    synthesizer = Synthesizer(epsilon=req.epsilon, delta=req.delta, batch_size=req.batch_size,
                              max_tokens=req.max_tokens, temperature=req.temperature,
                              top_k=None if req.method == "amin" else req.top_k, method=req.method, model=backend,
                              domain=req.domain)
    synthesizer.check_fits()  # the prompts (and a domain the template has no place for) are refused here
    batches = reference_batches(req.references, batch_size=req.batch_size, num=req.num)
    job = PreparedSynthesis(synthesizer, tuple(batches))
    return Plan("synthesize", req, job, charges_of("synthesize", req.id, job))


def _check_tokens(name: str, t: int, limit: int) -> None:
    if t > limit:
        raise InvalidParameterError(f"{name} {t} is above this server's limit of {limit}; ask for fewer tokens")
