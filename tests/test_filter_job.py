"""DP-Fusion under the per-group Renyi filter, as the jobs run it (issue 34): the certificate
from (epsilon, delta, alpha) alone, one spend per released token at its own prefix, one filter
row per document (continuous batching), speculative decoding with exactly the one-token law,
and every entry point (Python, CLI, service plan). The mechanism's soundness itself is audited
exactly in tests/mechanisms (the filter's audit)."""

from __future__ import annotations

import json
import math

import pytest
import tinylm
import torch
from click.testing import CliRunner

import tokendp
from tokendp import fusion
from tokendp.accounting import (dp_fusion_filter_alpha, dp_fusion_filter_budget, dp_fusion_filter_charge,
                                dp_fusion_filter_epsilon, dp_fusion_filter_pace)
from tokendp.errors import InvalidParameterError
from tokendp.fusion import Chunk, run_fusion
from tokendp.jobs.config import SanitizeConfig
from tokendp.jobs.sanitize import prepare_sanitize, run_sanitize, sanitize_stream
from tokendp.text.spans import Span

OPTIONS = {"prompt_template": "<|doc|>{document}<|rewrite|>", "placeholder": "<|mask|>"}
LETTER = ("Dear Dr Helen Marsh, I am writing about my patient Mr Tomas Lindqvist, born in 1961, "
          "who lives in Leeds. Yours sincerely, Dr Amir Patel.")
SPANS = [Span(8, 19, "PERSON"), Span(54, 69, "PERSON"), Span(79, 83, "DATE"), Span(98, 103, "LOC"),
         Span(121, 131, "PERSON")]


@pytest.fixture(scope="module")
def tiny():
    return tinylm.backend(OPTIONS)


def _prepare(backend, texts, spans, **settings):
    config = SanitizeConfig(**{"epsilon": 4.0, "accounting": "filter", **settings})
    return prepare_sanitize(texts, spans=spans, model=backend, config=config)


def test_the_certificate_comes_from_epsilon_delta_and_alpha_alone(tiny):
    """B_i = dp_fusion_filter_budget(epsilon_i, alpha, delta) whatever T; the per-step cap is
    the pace's share of B_i per hidden token; the report says filter and names B_i."""
    short, long = (tokendp.sanitize(LETTER, spans=SPANS, model=tiny, epsilon=8, alpha=4.0, delta=1e-6, seed=0,
                                    accounting="filter", max_new_tokens=t) for t in (8, 40))
    budget = dp_fusion_filter_budget(epsilon=8, alpha=4.0, delta=1e-6)
    for res, t in ((short, 8), (long, 40)):
        rep = res.report
        assert rep.accounting == "filter" and rep.alpha == 4.0
        for g in rep.groups:
            assert g.budget == budget and g.epsilon == dp_fusion_filter_epsilon(budget=budget, alpha=4.0, delta=1e-6)
            assert g.epsilon <= 8 and g.target == 8
            cap = dp_fusion_filter_pace(budget=budget, tokens=g.n_tokens, pace=0.5, groups=3, alpha=4.0)
            assert g.beta == pytest.approx(cap / 4.0, rel=1e-15)
            assert dp_fusion_filter_charge(divergence=cap, groups=3, alpha=4.0) <= 0.5 * budget / g.n_tokens
        d = rep.to_dict()
        assert d["accounting"] == "filter" and all(g["budget"] == budget for g in d["groups"])
        assert "whatever the length" in d["guarantee"]
    assert [g.epsilon for g in short.report.groups] == [g.epsilon for g in long.report.groups]
    chosen = tokendp.sanitize(LETTER, spans=SPANS, model=tiny, epsilon={"PERSON": 8, "DATE": 4, "LOC": 16}, delta=1e-6,
                              seed=0, accounting="filter", max_new_tokens=4)
    assert chosen.report.alpha == dp_fusion_filter_alpha(epsilon=4, delta=1e-6)  # the smallest target's order


def test_the_filter_takes_epsilon_not_beta_and_a_positive_pace():
    for settings, what in (({"beta": 0.1}, "give epsilon="), ({"epsilon": 4, "pace": 0}, "pace"),
                           ({"epsilon": 4, "pace": float("nan")}, "pace"),
                           ({"epsilon": 4, "accounting": "none"}, "accounting")):
        with pytest.raises(InvalidParameterError, match=what):
            tokendp.sanitize(LETTER, spans=SPANS, model="no-such-model", **{"accounting": "filter", **settings})


def test_each_released_token_spends_once_and_never_past_the_budget(tiny, monkeypatch):
    """One spend per released token, before it is sampled, of the step just taken; what remains
    is never negative and never grows."""
    prepared = _prepare(tiny, [LETTER], [SPANS], max_new_tokens=24)
    spends, seen = [], []
    real = fusion.RenyiFilter.spend

    def spend(self, docs, charges):
        before = self.remaining.clone()
        real(self, docs, charges)
        spends.append(len(docs))
        seen.append((before, self.remaining.clone(), charges.clone()))

    monkeypatch.setattr(fusion.RenyiFilter, "spend", spend)
    job, (out,) = run_fusion(prepared, seed=[3])
    assert len(spends) == len(out.token_ids)  # one per released token
    budget = torch.tensor(prepared.documents[0].budgets, dtype=torch.float64)
    for before, after, charges in seen:
        assert (charges >= 0).all() and (after >= 0).all() and (after <= before).all()
    assert (job.filter.remaining[0, :3] <= budget).all()
    spent = budget - job.filter.remaining[0, :3]
    assert (spent <= budget).all() and float(spent.max()) > 0  # the private rows moved the output


def test_speculative_decoding_has_the_one_token_law_under_the_filter(tiny):
    """With one document and a seed both engines draw the same numbers in the same order: the
    same rewrite, and the filter spends the same charges (one per released token), up to the
    last bits of logits that one forward pass over a draft computes in another order."""
    outs = []
    for speculative in (False, True):
        prepared = _prepare(tiny, [LETTER], [SPANS], max_new_tokens=30, speculative=speculative)
        job, (out,) = run_fusion(prepared, seed=[11])
        outs.append((out.token_ids, job.filter.remaining.clone()))
    assert outs[0][0] == outs[1][0]
    assert torch.allclose(outs[0][1], outs[1][1], rtol=0, atol=1e-6)  # a charge is ~0.1 here


def test_continuous_batching_gives_each_document_its_own_filter(tiny):
    """A slot's filter row is fresh for every document: each output and report equal decoding
    the document alone with its seed."""
    texts = [LETTER, LETTER[:70], LETTER[20:]]
    spans = [SPANS, [s for s in SPANS if s.end <= 70], [Span(s.start - 20, s.end - 20, s.label) for s in SPANS
                                                        if s.start >= 20]]
    chunks = [Chunk(_prepare(tiny, [t], [s], max_new_tokens=16), (i,), (50 + i,))
              for i, (t, s) in enumerate(zip(texts, spans))]
    streamed = dict(sanitize_stream(chunks, slots=2))
    for i, (t, s) in enumerate(zip(texts, spans)):
        (alone,) = run_sanitize(_prepare(tiny, [t], [s], max_new_tokens=16), seed=[50 + i])
        assert streamed[i].to_dict() == alone.to_dict(), i


def test_an_exhausted_budget_reads_only_the_public_row():
    """epsilon 0 for every group: B = 0, every lam 0, so the perfect copier never sees a name;
    the run still goes to its end (no stop on exhaustion)."""
    copier = tinylm.backend(OPTIONS, copier=True)
    res = tokendp.sanitize(LETTER, spans=SPANS, model=copier, epsilon=0, accounting="filter", seed=0)
    assert all(g.budget == 0 and g.epsilon == 0 for g in res.report.groups)
    for name in ("Helen", "Lindqvist", "1961", "Leeds", "Patel"):
        assert name not in res.text
    assert "Yours sincerely" in res.text


def test_the_cli_and_the_service_plan_speak_the_filter(tmp_path):
    from tokendp.cli import main
    from tokendp.service.plans import plan_generate, plan_sanitize
    from tokendp.service.schemas import GenerateRequest, SanitizeRequest

    doc = tmp_path / "doc.txt"
    doc.write_text(LETTER)
    (tmp_path / "spans.json").write_text(json.dumps([s.to_dict() for s in SPANS]))
    model = str(tinylm.model_dir(json.dumps(OPTIONS)))
    common = [str(doc), "--spans", str(tmp_path / "spans.json"), "--model", model, "--accounting", "filter"]
    res = CliRunner().invoke(main, ["sanitize", *common, "--beta", "0.1"])
    assert res.exit_code == 2 and "give epsilon=" in res.output and "loading model" not in res.output
    res = CliRunner().invoke(main, ["sanitize", *common, "--epsilon", "4", "--max-new-tokens", "6", "--seed", "0",
                                    "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)["report"]
    assert report["accounting"] == "filter" and all("budget" in g for g in report["groups"])
    readable = CliRunner().invoke(main, ["sanitize", *common, "--epsilon", "4", "--max-new-tokens", "6", "--seed",
                                         "0"])
    assert "accounting filter" in readable.output and "budget" in readable.output
    req = SanitizeRequest(id="letter", text=LETTER, spans=[{"start": s.start, "end": s.end, "label": s.label} for s in SPANS],
                          epsilon=8, alpha=4.0, accounting="filter", max_new_tokens=6)
    plan = plan_sanitize(req, tinylm.backend(OPTIONS), None, max_tokens=64)
    budget = dp_fusion_filter_budget(epsilon=8, alpha=4.0, delta=1e-5)
    assert {unit[1]: c.value for unit, c in plan.charges.items()} == {"DATE": budget, "LOC": budget,
                                                                      "PERSON": budget}
    assert all(c.alpha == 4.0 and math.isfinite(c.value) for c in plan.charges.values())
    req = GenerateRequest(id="letter", prompt="Who?", context=LETTER, spans=req.spans, epsilon=8, alpha=4.0,
                          accounting="filter", max_new_tokens=6)
    plan = plan_generate(req, tinylm.backend(OPTIONS), None, max_tokens=64)
    assert plan.job.accounting == "filter"
    assert {unit[1]: c.value for unit, c in plan.charges.items()} == {"DATE": budget, "LOC": budget,
                                                                      "PERSON": budget}


def test_generate_spends_its_span_groups_through_the_filter(tiny):
    """generate's span groups under the filter: the certificate from (epsilon, delta, alpha)
    alone, whatever T; the copier sees no name at epsilon 0; untrusted chunks (any change is a
    neighbour, outside the filter's proof) are refused before anything loads."""
    from tokendp.jobs.generate import generate

    short, long = (generate("Who?", context=LETTER, spans=SPANS, model=tiny, epsilon=8, alpha=4.0, seed=0,
                            accounting="filter", max_new_tokens=t) for t in (4, 24))
    budget = dp_fusion_filter_budget(epsilon=8, alpha=4.0, delta=1e-5)
    for res in (short, long):
        assert res.report.accounting == "filter" and "whatever the answer's length" in res.report.guarantee
        assert all(g.budget == budget and g.epsilon <= 8 for g in res.report.groups)
    assert [g.epsilon for g in short.report.groups] == [g.epsilon for g in long.report.groups]
    copier = tinylm.backend(OPTIONS, copier=True)
    res = generate("Who?", context=LETTER, spans=SPANS, model=copier, epsilon=0, accounting="filter", seed=0,
                   max_new_tokens=60)
    assert not any(name in res.text for name in ("Helen", "Lindqvist", "Leeds", "Patel"))
    with pytest.raises(InvalidParameterError, match="untrusted chunks"):
        generate("Who?", context=LETTER, spans=SPANS, untrusted="a page", model="no-such-model", epsilon=4,
                 accounting="filter")
    with pytest.raises(InvalidParameterError, match="give epsilon="):
        generate("Who?", context=LETTER, spans=SPANS, model="no-such-model", beta=0.1, accounting="filter")
    out = CliRunner().invoke(__import__("tokendp.cli", fromlist=["main"]).main, [
        "generate", "--prompt", "Who?", "--untrusted", __file__, "--model", "no-such-model", "--epsilon", "4",
        "--accounting", "filter"])
    assert out.exit_code == 2 and "untrusted chunks" in out.output and "loading model" not in out.output


@pytest.mark.parametrize("accounting, args", [
    ("filter", ["--epsilon", "0.01"]),  # no order of the grid leaves a Renyi budget
    ("filter", ["--epsilon", "1", "--alpha", "1.5"]),  # at or below alpha 1.5's conversion offset
    ("fixed", ["--epsilon", "0.001"]),
    ("fixed", ["--epsilon", "1", "--alpha", "1.5"]),
    ("fixed", ["--epsilon", '{"PERSON": 8, "LOC": 0.001}']),  # the smallest positive target decides
])
def test_unreachable_epsilons_are_refused_before_anything_loads(tmp_path, accounting, args):
    """An epsilon at or below the RDP-to-(epsilon, delta) conversion's offset has no beta and
    no budget whatever T or the groups: sanitize, generate and the Python API refuse it before
    the model or the tagger is loaded (the model name here does not exist)."""
    from tokendp import sanitize
    from tokendp.cli import main
    from tokendp.jobs.generate import generate

    doc = tmp_path / "letter.txt"
    doc.write_text(LETTER)
    for command in (["sanitize", str(doc)], ["generate", "--prompt", "Who?", "--context", str(doc)]):
        out = CliRunner().invoke(main, [*command, "--model", "no-such-model", "--accounting", accounting, *args])
        assert out.exit_code == 2 and "epsilon" in out.output and "loading model" not in out.output, out.output
    epsilon = json.loads(args[1])
    alpha = float(args[3]) if len(args) > 2 else None
    for call in (lambda: sanitize(LETTER, model="no-such-model", epsilon=epsilon, alpha=alpha, accounting=accounting),
                 lambda: generate("Who?", context=LETTER, model="no-such-model", epsilon=epsilon, alpha=alpha,
                                  accounting=accounting)):
        with pytest.raises(InvalidParameterError, match="epsilon"):
            call()
