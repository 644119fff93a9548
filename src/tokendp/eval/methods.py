"""The methods compared by ``tokendp eval sanitize``, each as rows + a next-token step + epsilon.

Every method reads the same prompt template (the model's ``tokendp.json``) around some view of
the document and turns the logits of its rows into one next-token distribution:

==============  ====================================  =========================================
method          rows it reads                         what it protects
==============  ====================================  =========================================
original        the document                          nothing (reference, epsilon = inf)
public          every span -> placeholders            every span, perfectly (epsilon = 0)
scrub           every span -> its label, "[PERSON]"   tagged spans, heuristically (no epsilon)
dp-decoding     the document                          the whole document: q' = lam q + (1-lam)/V
                                                      (Majmudar et al. 2022), pure DP per token
dp-prompt       the document                          the whole document: logits clipped to a
                                                      width w, softmax at temperature tau (Utpala
                                                      et al. 2023), pure DP per token
dp-fusion       public + one row per privacy group    each group's spans, with its own epsilon
                                                      (Thareja et al., ICLR 2026), every token
                                                      charged the per-token cap (fixed accounting)
dp-fusion-      the same rows                         the same, each group spending an RDP budget
filter                                                through a per-group Renyi filter
==============  ====================================  =========================================

A :class:`Setting` fixes a method's parameters. :func:`make_settings` calibrates the private
methods to target epsilons (total over the run's T = max new tokens at ``delta``: per group for
DP-Fusion, for the whole output for DP-Decoding and DP-Prompt) and adds the paper's own
settings labelled with the epsilon they certify.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tokendp.accounting import (dp_decoding_epsilon, dp_decoding_lam, dp_fusion_beta, dp_fusion_epsilon,
                                dp_fusion_filter_alpha, dp_fusion_filter_budget, dp_fusion_filter_epsilon,
                                dp_fusion_filter_max_lam, dp_fusion_filter_pace, dp_prompt_epsilon,
                                dp_prompt_temperature)
from tokendp.errors import InvalidParameterError
from tokendp.mechanisms import DPDecoding, DPFusion, DPFusionFilter, DPPrompt, MechanismStep, Original, Public, RenyiFilter
from tokendp.params import DEFAULT_PACE
from tokendp.fusion import choose_alpha
from tokendp.text.contexts import Placeholders, PromptTemplate, build_contexts
from tokendp.text.spans import Span

METHODS = ("original", "public", "scrub", "dp-decoding", "dp-prompt", "dp-fusion", "dp-fusion-filter")
PRIVATE_METHODS = ("dp-decoding", "dp-prompt", "dp-fusion", "dp-fusion-filter")
FUSION_METHODS = ("dp-fusion", "dp-fusion-filter")
PAPER_DP_DECODING_LAM = 0.9
PAPER_DP_PROMPT = (50.0, 1.75)  # clip width w, temperature tau
PAPER_DP_FUSION_CAPS = (0.01, 0.1)  # alpha * beta
PAPER_DP_FUSION_ALPHA = 2.0
DP_PROMPT_WIDTH = PAPER_DP_PROMPT[0]
POSITIONS = 32  # teacher-forced positions per mechanism call


@dataclass(frozen=True)
class DocumentRows:
    """Token ids of one document and of every view of it that a method reads (prompt included)."""

    target: tuple[int, ...]  # the document's tokens: the teacher-forcing target
    original: tuple[int, ...]
    public: tuple[int, ...]
    groups: tuple[tuple[int, ...], ...]  # DP-Fusion's private rows, one per group (may be empty)
    scrub: tuple[int, ...]
    public_prefix: int  # leading tokens the public and group rows share, from the span positions
    group_tokens: tuple[int, ...]  # per group, the tokens it hides (public: one placeholder each)


def scrub_text(text: str, spans: Sequence[Span]) -> str:
    """``text`` with each span (overlapping spans merged) replaced by ``[LABEL]``."""
    out, last = [], 0
    for s in sorted(spans):
        if s.start < last:  # overlaps the previous replacement: already covered
            continue
        out += [text[last:s.start], f"[{s.label}]"]
        last = s.end
    return "".join(out) + text[last:]


def document_rows(text: str, spans: Sequence[Span], tokenizer: Any, *, template: PromptTemplate,
                  placeholder: int | Placeholders) -> DocumentRows:
    """Tokenise ``text`` once and build every view of it (see :func:`build_contexts`)."""
    ctx = build_contexts(text, spans, tokenizer, template=template, placeholder=placeholder)
    target = tuple(tokenizer(text, add_special_tokens=False)["input_ids"])
    scrubbed = tuple(tokenizer(scrub_text(text, spans), add_special_tokens=False)["input_ids"])
    return DocumentRows(target, template.wrap(target), ctx.rows[0], tuple(ctx.rows[1:]),
                        template.wrap(scrubbed), ctx.public_prefix, tuple(g.n_tokens for g in ctx.groups))


@dataclass(frozen=True)
class Setting:
    """A method with fixed parameters. ``target`` is the epsilon it was calibrated to, if any."""

    method: str
    name: str
    lam: float | None = None
    clip_width: float | None = None
    temperature: float | None = None
    alpha: float | None = None
    cap: float | None = None  # DP-Fusion alpha * beta when fixed (paper settings)
    target: float | None = None
    pace: float = DEFAULT_PACE  # dp-fusion-filter: one token spends at most pace * B_i / n_i
    max_lam: float | None = None  # dp-fusion-filter: the weight ceiling (None: dp_fusion_filter_max_lam's rule)

    @property
    def key(self) -> str:
        """A file-name-safe identifier of the setting."""
        return f"{self.method}__{self.name}".replace("*", "x").replace("=", "-").replace(",", "_")


def make_settings(methods: Sequence[str], *, epsilons: Sequence[float], paper: bool, vocab_size: int,
                  max_new_tokens: int, delta: float, group_counts: Sequence[int] = (1,),
                  filter_epsilons: Sequence[float] | None = None) -> list[Setting]:
    """Every setting to evaluate, in ``methods`` order.

    DP-Fusion's Renyi order at a target epsilon is :func:`tokendp.fusion.choose_alpha` for the
    numbers of groups ``group_counts`` of the evaluated documents (public parameters).
    ``filter_epsilons``: dp-fusion-filter's targets, when not ``epsilons`` (the filter at half
    the fixed accounting's epsilon, docs/sanitize.md).
    """
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise InvalidParameterError(f"unknown methods {unknown}; choose from {', '.join(METHODS)}")
    out: list[Setting] = []
    for m in methods:
        if m not in PRIVATE_METHODS:
            out.append(Setting(m, "-"))
            continue
        for eps in filter_epsilons if m == "dp-fusion-filter" and filter_epsilons is not None else epsilons:
            out.append(_calibrated(m, float(eps), vocab_size, max_new_tokens, delta, group_counts))
        if paper:
            out += _paper(m)
    return out


def _calibrated(method: str, eps: float, vocab_size: int, tokens: int, delta: float,
                group_counts: Sequence[int]) -> Setting:
    name = f"eps={eps:g}"
    if method == "dp-decoding":
        return Setting(method, name, lam=dp_decoding_lam(epsilon=eps, vocab_size=vocab_size, max_tokens=tokens),
                       target=eps)
    if method == "dp-prompt":
        tau = dp_prompt_temperature(epsilon=eps, clip_width=DP_PROMPT_WIDTH, max_tokens=tokens)
        return Setting(method, name, clip_width=DP_PROMPT_WIDTH, temperature=tau, target=eps)
    if method == "dp-fusion-filter":  # the order the filter chooses for its target (public)
        return Setting(method, name, alpha=dp_fusion_filter_alpha(epsilon=eps, delta=delta), target=eps)
    targets = [(eps, m, tokens) for m in sorted({max(1, m) for m in group_counts})]
    return Setting(method, name, alpha=choose_alpha(targets, delta=delta), target=eps)


def _paper(method: str) -> list[Setting]:
    if method == "dp-fusion-filter":
        return []  # the paper has no filter
    if method == "dp-decoding":
        return [Setting(method, f"lambda={PAPER_DP_DECODING_LAM:g}", lam=PAPER_DP_DECODING_LAM)]
    if method == "dp-prompt":
        w, tau = PAPER_DP_PROMPT
        return [Setting(method, f"w={w:g},tau={tau:g}", clip_width=w, temperature=tau)]
    return [Setting(method, f"alpha*beta={c:g}", alpha=PAPER_DP_FUSION_ALPHA, cap=c) for c in PAPER_DP_FUSION_CAPS]


class BoundMethod:
    """A setting applied to a list of documents: their rows, a step function, their epsilons.

    ``step(logits # (N, R, V), docs # (N,), temperature) -> MechanismStep`` where ``docs`` index
    into the bound documents (this is :class:`tokendp.generation.StepFn`). Rows of a document
    with fewer than R rows are padding (copies of its row 0) and are masked out.
    """

    def __init__(self, setting: Setting, docs: Sequence[DocumentRows], *, vocab_size: int,
                 max_new_tokens: int, delta: float) -> None:
        self.setting, self.docs = setting, list(docs)
        self.tokens, self.delta, self.vocab_size = max_new_tokens, delta, vocab_size
        if setting.method in FUSION_METHODS:
            self._bind_fusion()
        elif setting.method == "dp-decoding":
            self.mechanism = DPDecoding(lam=setting.lam)
        elif setting.method == "dp-prompt":
            self.mechanism = DPPrompt(clip_width=setting.clip_width, temperature=setting.temperature)
        elif setting.method == "public":
            self.mechanism = Public()
        else:  # original, and scrub: the original mechanism on the scrubbed view
            self.mechanism = Original()

    # ------------------------------------------------------------------ rows
    def rows(self, doc: DocumentRows) -> list[tuple[int, ...]]:
        """The rows the method reads for ``doc`` (row 0 first)."""
        method = self.setting.method
        if method == "public":
            return [doc.public]
        if method == "scrub":
            return [doc.scrub]
        if method in FUSION_METHODS:
            return [doc.public, *(doc.groups or (doc.public,))]  # no group: one masked dummy row
        return [doc.original]

    # ------------------------------------------------------------------ step
    def step(self, logits: torch.Tensor, docs: torch.Tensor, temperature: float = 1.0) -> MechanismStep:
        method = self.setting.method
        if method in FUSION_METHODS:
            width = logits.shape[-2] - 1
            betas = self.betas[docs.cpu(), :width].to(logits.device)  # (N, m)
            mask = self.group_mask[docs.cpu(), :width].to(logits.device)  # (N, m)
            if method == "dp-fusion":
                return self.fusion.step(logits, betas=betas, group_mask=mask, temperature=temperature,
                                        realised_divergence=False)
            rows = docs.cpu()  # one filter row per document, spent at once
            out = self.fusion.step(logits, remaining=self.filter.remaining[rows, :width].to(logits.device), pace=betas,
                                   group_mask=mask, temperature=temperature,
                                   max_lam=self.max_lams[rows, :width].to(logits.device))
            self.filter.spend(rows, out.charges.cpu())
            return out
        if method == "public":
            return self.mechanism.step(logits[..., :1, :], temperature=temperature)
        # The other mechanisms read the private row 1 and ignore row 0; the one row these methods
        # read stands in for both (a view, no extra forward pass).
        view = logits[..., :1, :].expand(*logits.shape[:-2], 2, logits.shape[-1])  # (..., 2, V)
        if method == "dp-prompt":
            return self.mechanism.step(view)
        return self.mechanism.step(view, temperature=temperature)

    def teacher_forced(self, logits: torch.Tensor, i: int) -> torch.Tensor:
        """Log-probs ``# (n, V)`` of document i's steps at the n positions of ``logits # (n, R, V)``
        (the prefixes of one forced text): vectorised over positions, :data:`POSITIONS` at a time
        (the float64 search holds several (positions, R, V) tensors); under the filter, whose
        budget at each position is what the positions before it left, by :meth:`_filter_forced`."""
        if self.setting.method == "dp-fusion-filter":
            return self._filter_forced(logits, i)
        docs = torch.full((logits.shape[0],), i, dtype=torch.long)
        return torch.cat([self.step(logits[t:t + POSITIONS], docs[t:t + POSITIONS]).logprobs
                          for t in range(0, logits.shape[0], POSITIONS)])

    def _filter_forced(self, logits: torch.Tensor, i: int) -> torch.Tensor:
        """The filter's teacher forcing ``(n, R, V) -> (n, V)``, with a fresh ledger row.

        Position t's step reads the ledger only through its caps c_i = min(pace_i, rho^-1(R_i - A)) and its
        check that each charge fits R_i (:meth:`DPFusionFilter.caps`). So a block of positions is
        stepped at once on the remaining budget R at its start, and its positions are then spent in
        order while each still has the caps of the block's start and its charges fit what is left:
        those steps are the ones the positions would take one at a time (up to the search's
        float32-or-float64 choice, made per batch from public rows, and the last bits batched
        kernels round). The first position that fails starts the next block. While no group's budget
        binds (c_i = pace_i) or after it is spent (c_i = 0) the caps stay put and blocks are
        :data:`POSITIONS` long; while one binds, one position at a time."""
        width = logits.shape[-2] - 1
        pace, mask = self.betas[i:i + 1, :width], self.group_mask[i:i + 1, :width]  # (1, m)
        ceiling = self.max_lams[i:i + 1, :width]  # (1, m)
        ledger, row = RenyiFilter(self.budgets[i:i + 1, :width].clone()), torch.zeros(1, dtype=torch.long)
        out, t = [], 0
        while t < logits.shape[0]:
            start = ledger.remaining[:, :width]  # (1, m)
            caps = self.fusion.caps(start, pace, mask, logits.shape[-1])  # (1, m)
            settled = bool(((caps == pace) | (caps == 0)).all())
            block = logits[t:t + (POSITIONS if settled else 1)]  # (k, R, V)
            k = block.shape[0]
            step = self.fusion.step(block, remaining=start.expand(k, -1), pace=pace.expand(k, -1),
                                    group_mask=mask.expand(k, -1), max_lam=ceiling.expand(k, -1))
            taken = 0
            for j in range(k):
                left = ledger.remaining[:, :width]
                same = torch.equal(self.fusion.caps(left, pace, mask, logits.shape[-1]), caps)
                if j and not (same and bool((step.charges[j] <= left).all())):
                    break
                ledger.spend(row, step.charges[j:j + 1])
                taken += 1
            out.append(step.logprobs[:taken])
            t += taken
        return torch.cat(out)  # (n, V)

    def _bind_fusion(self) -> None:
        s = self.setting
        filtered = s.method == "dp-fusion-filter"
        self.fusion = DPFusionFilter(alpha=s.alpha) if filtered else DPFusion(alpha=s.alpha)
        counts = [len(d.groups) for d in self.docs]
        width = max([1, *counts])
        self.betas = torch.zeros((len(self.docs), width), dtype=torch.float64)  # (N, m_max); float32 could round beta up
        self.budgets = torch.zeros((len(self.docs), width), dtype=torch.float64)  # (N, m_max): the filter's B
        self.group_mask = torch.zeros((len(self.docs), width), dtype=torch.bool)  # (N, m_max)
        self.max_lams = torch.ones((len(self.docs), width), dtype=torch.float64)  # (N, m_max): the filter's ceilings
        for i, (doc, m) in enumerate(zip(self.docs, counts)):
            if m:
                self.betas[i, :m] = torch.tensor(self._paces(doc) if filtered else [self._beta(m)] * m,
                                                 dtype=torch.float64)
                self.budgets[i, :m] = self._budget() if filtered else 0.0
                self.max_lams[i, :m] = self._max_lam() if filtered else 1.0
                self.group_mask[i, :m] = True
        self.filter = RenyiFilter(self.budgets.clone()) if filtered else None

    def _paces(self, doc: DocumentRows) -> list[float]:
        """The filter's per-step divergence caps of ``doc``'s groups (dp_fusion_filter_pace)."""
        s, m = self.setting, len(doc.groups)
        return [dp_fusion_filter_pace(budget=self._budget(), tokens=max(n, 1), pace=s.pace, groups=m, alpha=s.alpha)
                for n in doc.group_tokens]

    def _max_lam(self) -> float:
        s = self.setting
        return dp_fusion_filter_max_lam(budget=self._budget(), alpha=s.alpha) if s.max_lam is None else s.max_lam

    def _budget(self) -> float:
        s = self.setting
        return dp_fusion_filter_budget(epsilon=s.target, alpha=s.alpha, delta=self.delta)

    def _beta(self, groups: int) -> float:
        s = self.setting
        if s.cap is not None:
            return s.cap / s.alpha
        if s.target == 0:
            return 0.0
        return dp_fusion_beta(epsilon=s.target, alpha=s.alpha, groups=groups, max_tokens=self.tokens,
                              delta=self.delta)

    # ------------------------------------------------------------------ epsilon
    def epsilon(self, doc: DocumentRows) -> float | None:
        """The certified epsilon for ``doc``: per group for DP-Fusion, whole output otherwise.

        0 for public (the output ignores the private text), None where there is no guarantee.
        """
        s, t = self.setting, self.tokens
        if s.method == "public":
            return 0.0
        if s.method == "dp-decoding":
            return dp_decoding_epsilon(lam=s.lam, vocab_size=self.vocab_size, max_tokens=t)
        if s.method == "dp-prompt":
            return dp_prompt_epsilon(clip_width=s.clip_width, temperature=s.temperature, max_tokens=t)
        if s.method == "dp-fusion":
            m = len(doc.groups)
            return dp_fusion_epsilon(alpha=s.alpha, beta=self._beta(m), groups=m, max_tokens=t,
                                     delta=self.delta) if m else 0.0
        if s.method == "dp-fusion-filter":
            return dp_fusion_filter_epsilon(budget=self._budget(), alpha=s.alpha, delta=self.delta) if doc.groups \
                else 0.0
        return None
