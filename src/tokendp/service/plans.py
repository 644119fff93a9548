"""Plans: what a request will cost each protected unit, fixed before anything is generated.

A plan is computed from the request's public parameters, the spans (the client's, or the
server's tagger's) and the model's tokenizer, exactly as the job will compute them: the same
contexts give the same groups m, and the plan passes the resolved order alpha, T and the spans
to the job explicitly, so the job derives the same beta_i and epsilon_i. After generation
:meth:`verify` compares the job's report with the plan and the service withholds any output
whose certificate differs (the reservation stays spent).

Charges (docs/service.md, "Budget semantics"):

* sanitize and generate (DP-Fusion, m groups, T tokens): unit (id, group i) gets the RDP bound
  T r_i at alpha, r_i = :func:`~tokendp.accounting.dp_fusion_rdp_per_token` (alpha, beta_i, m).
  Untrusted chunks of generate are groups too (they count in m) but no person's budget: their
  per-request bound limits their influence and is reported, not charged.
* ``method="public"``: the output reads no group, nothing is charged.
* synthesize (InvisibleInk or Amin et al., T tokens, B references per text): unit
  (reference set id, "references") gets rho = T rho_tok(C) zCDP, C calibrated from epsilon;
  each reference is read by one text only, so that is every reference's cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tokendp.accounting import (amin_clip, amin_rho_per_token, dp_fusion_epsilon, dp_fusion_rdp_per_token,
                                invisibleink_clip, invisibleink_rho_per_token)
from tokendp.backends import HFBackend
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.fusion import check_known_groups, check_params, group_betas, resolve_alphas, spans_of
from tokendp.generate import PLAIN_QA_TEMPLATE
from tokendp.service.composition import Charge
from tokendp.service.schemas import GenerateRequest, SanitizeRequest, SynthesizeRequest
from tokendp.synthesize import partition
from tokendp.text.contexts import DocumentContexts, build_contexts, placeholder_id, prompt_template
from tokendp.text.prompt_pair import synthesis_prompts
from tokendp.text.prompts import build_prompt_contexts, is_untrusted
from tokendp.text.spans import Span

SYNTHESIS_GROUP = "references"


class AccountingMismatch(Exception):
    """A job's certificate differs from its plan: the output is withheld."""


@dataclass
class Plan:
    """A request's charges and the exact parameters its job must run with."""

    kind: str
    request: Any
    charges: dict[tuple[str, str], Charge]
    params: dict[str, Any]  # keyword arguments for the job
    expected: dict[str, Any] = field(default_factory=dict)  # what verify() compares

    def batch_key(self) -> tuple | None:
        """Requests with equal keys may share a batch; None: run alone. Sanitize requests with the
        same parameters share one (each document keeps its own seed, spans and random stream,
        and its alpha is fixed by its own plan: docs/service.md, "Batching")."""
        if self.kind != "sanitize":
            return None
        return tuple((k, _frozen(v)) for k, v in sorted(self.params.items()) if k not in ("spans", "seed"))

    def verify(self, report: dict[str, Any]) -> None:
        """Raise AccountingMismatch unless ``report`` certifies what was reserved."""
        got = {k: report.get(k) for k in self.expected if k != "groups"}
        want = {k: v for k, v in self.expected.items() if k != "groups"}
        if got != want or _report_groups(report) != self.expected.get("groups"):
            raise AccountingMismatch(f"{self.kind} request: the job's certificate differs from the reservation")


def _frozen(value: Any) -> Any:
    return tuple(sorted(value.items())) if isinstance(value, dict) else value


def _report_groups(report: dict[str, Any]) -> list[tuple[str, float | None, float | None]] | None:
    if "groups" not in report:
        return None
    rows = [*report["groups"], *report.get("untrusted", [])]
    return [(g.get("label", g.get("name")), g["beta"], g["epsilon"]) for g in rows]


def _check_tokens(t: int, limit: int) -> None:
    if t > limit:
        raise InvalidParameterError(f"max_new_tokens {t} is above this server's limit of {limit}; ask for fewer tokens")


def _fusion_charges(doc: str, ctx: DocumentContexts, req: Any, t: int) -> tuple[float, dict, list]:
    """alpha, the charges per span group and the expected (group, beta, epsilon) rows."""
    names = [g.name for g in ctx.groups]
    if req.method == "public":
        return 2.0, {}, [(n, 0.0, 0.0) for n in names]
    check_params("dp-fusion", req.alpha, req.delta, req.temperature, req.beta, req.epsilon)
    check_known_groups(req.beta, set(names), "beta")
    check_known_groups(req.epsilon, set(names), "epsilon")
    (alpha,) = resolve_alphas("dp-fusion", req.alpha, [ctx], [t], req.epsilon, delta=req.delta)
    betas = group_betas(ctx, alpha=alpha, delta=req.delta, max_tokens=t, beta=req.beta, epsilon=req.epsilon)
    m = len(names)
    charges = {(doc, n): Charge("rdp", t * dp_fusion_rdp_per_token(alpha=alpha, beta=b, groups=m), alpha)
               for n, b in zip(names, betas) if not is_untrusted(n)}
    rows = [(n, b, dp_fusion_epsilon(alpha=alpha, beta=b, groups=m, max_tokens=t, delta=req.delta))
            for n, b in zip(names, betas)]
    return alpha, charges, rows


def _spans(text: str, spans: list | None, tagger: Any) -> list[Span]:
    return spans_of(text, None if spans is None else [s.model_dump() for s in spans], tagger)


def plan_sanitize(req: SanitizeRequest, backend: HFBackend, tagger: Any, *, max_tokens: int) -> Plan:
    """The plan of one /v1/sanitize request (groups by label, T given or 1.2x the document + 16)."""
    tok, opts = backend.tokenizer, backend.options
    spans = _spans(req.text, req.spans, tagger)
    ctx = build_contexts(req.text, spans, tok, template=prompt_template(tok, options=opts),
                         placeholder=placeholder_id(tok, options=opts), groups="by-label")
    t = req.max_new_tokens or min(math.ceil(1.2 * ctx.document_tokens) + 16, max_tokens)
    _check_tokens(t, max_tokens)
    backend.check_fits(ctx.length, t)
    alpha, charges, rows = _fusion_charges(req.id, ctx, req, t)
    params = dict(spans=spans, method=req.method, alpha=alpha, delta=req.delta, max_new_tokens=t,
                  temperature=req.temperature, seed=req.seed, groups="by-label",
                  beta=req.beta if req.method != "public" else None,
                  epsilon=req.epsilon if req.method != "public" else None)
    expected = dict(alpha=alpha, delta=req.delta, max_new_tokens=t, groups=rows)
    return Plan("sanitize", req, charges, params, expected)


def plan_generate(req: GenerateRequest, backend: HFBackend, tagger: Any, *, max_tokens: int) -> Plan:
    """The plan of one /v1/generate request: the context document's span groups are charged."""
    _check_tokens(req.max_new_tokens, max_tokens)
    tok, opts = backend.tokenizer, backend.options
    spans = _spans(req.context, req.spans, tagger)
    template = None if getattr(tok, "chat_template", None) else PLAIN_QA_TEMPLATE
    ctx = build_prompt_contexts(req.prompt, [(req.context, spans)], req.untrusted, tok,
                                template=prompt_template(tok, instruction="", template=template),
                                placeholder=placeholder_id(tok, options=opts), groups="by-label")
    if backend.max_context is not None and max(map(len, ctx.rows)) + req.max_new_tokens > backend.max_context:
        raise InvalidInputError("the prompt with its documents and max_new_tokens does not fit the model's context")
    alpha, charges, rows = _fusion_charges(req.id, ctx, req, req.max_new_tokens)
    params = dict(context=[req.context], spans=[spans], untrusted=[req.untrusted], method=req.method, alpha=alpha,
                  delta=req.delta, max_new_tokens=req.max_new_tokens, temperature=req.temperature, seed=req.seed,
                  groups="by-label", beta=req.beta if req.method != "public" else None,
                  epsilon=req.epsilon if req.method != "public" else None)
    expected = dict(alpha=alpha, delta=req.delta, max_new_tokens=req.max_new_tokens, groups=rows)
    return Plan("generate", req, charges, params, expected)


def plan_synthesize(req: SynthesizeRequest, backend: HFBackend, *, max_tokens: int) -> Plan:
    """The plan of one /v1/synthesize request: rho = T rho_tok(C) per reference of the set."""
    _check_tokens(req.max_tokens, max_tokens)
    synthesis_prompts(backend.tokenizer, options=backend.options, domain=req.domain)  # refused here, not after
    batches = partition(len(req.references), batch_size=req.batch_size, num=req.num)
    top_k = None if req.method == "amin" else req.top_k
    calibrate, per_token = ((invisibleink_clip, invisibleink_rho_per_token) if req.method == "invisibleink"
                            else (amin_clip, amin_rho_per_token))
    clip = calibrate(epsilon=req.epsilon, delta=req.delta, batch_size=req.batch_size, temperature=req.temperature,
                     max_tokens=req.max_tokens)
    rho = req.max_tokens * per_token(clip=clip, batch_size=req.batch_size, temperature=req.temperature)
    params = dict(method=req.method, epsilon=req.epsilon, delta=req.delta, batch_size=req.batch_size,
                  max_tokens=req.max_tokens, temperature=req.temperature, top_k=top_k, num=len(batches),
                  domain=req.domain, seed=req.seed)
    return Plan("synthesize", req, {(req.id, SYNTHESIS_GROUP): Charge("zcdp", rho)}, params,
                dict(clip=clip, delta=req.delta, max_tokens=req.max_tokens, batch_size=req.batch_size))
