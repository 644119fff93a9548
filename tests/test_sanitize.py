"""tokendp.sanitize: the certificate equals the accountant, no leak at beta 0, clear errors."""

from __future__ import annotations

import json
import math

import pytest

import tinylm
from tokendp.accounting import dp_fusion_epsilon
from tokendp.backends import HFBackend
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.jobs.sanitize import choose_alpha, sanitize, sanitize_batch
from tokendp.params import DEFAULT_NO_REPEAT_NGRAM_SIZE, DEFAULT_STOP_AT_REPEATED_LINE
from tokendp.text.spans import Span

OPTIONS = {"prompt_template": "<|doc|>{document}<|rewrite|>", "placeholder": "<|mask|>"}
LETTER = ("Dear Dr Helen Marsh, I am writing about my patient Mr Tomas Lindqvist, born in 1961, "
          "who lives in Leeds. Yours sincerely, Dr Amir Patel.")
SPANS = [Span(8, 19, "PERSON"), Span(54, 69, "PERSON"), Span(79, 83, "DATETIME"),
         Span(98, 103, "LOC"), Span(121, 131, "PERSON")]


def _span_texts(text, spans):
    return {text[s.start:s.end] for s in spans}


def test_copier_sees_what_its_rows_show(copier):
    original = sanitize(LETTER, spans=SPANS, model=copier, method="original", temperature=0)
    assert original.text == LETTER and original.report.stop_reason == "eos"
    assert original.report.guarantee.startswith("none")
    assert all(g.epsilon is None for g in original.report.groups)


def test_speculation_copies_in_few_passes_and_changes_no_output(copier):
    """The copier continues its row, so prompt lookup guesses right: the same rewrite in about a
    fifth of the passes with drafts of 4; never a placeholder guessed (the public rewrite); on
    by default for one document, off for a batch."""
    passes = []
    inner = copier.extend
    copier.extend = lambda state, tokens: passes.append(tokens[0].tolist()) or inner(state, tokens)
    try:
        for method in ("original", "public"):
            runs = []
            for speculative in (False, True):
                passes.clear()
                res = sanitize(LETTER, spans=SPANS, model=copier, method=method, temperature=0, speculative=speculative)
                runs.append((res.text, len(passes), res.report.tokens_generated))
            assert runs[0][0] == runs[1][0] and runs[0][1] == runs[0][2]  # one pass per token after the prefill
            if method == "original":
                assert runs[0][0] == LETTER and runs[1][1] <= runs[1][2] / 4
                speculative_passes = runs[1][1]
            mask = copier.tokenizer.convert_tokens_to_ids("<|mask|>")
            assert all(mask not in tokens[1:] for tokens in passes)
        passes.clear()
        default = [sanitize(LETTER, spans=SPANS, model=copier, method="original", temperature=0)]
        assert default[0].text == LETTER and len(passes) == speculative_passes  # on by default for one document
        passes.clear()
        default = sanitize_batch([LETTER] * 2, spans=[SPANS] * 2, model=copier, method="original", temperature=0)
        assert len(passes) == default[0].report.tokens_generated  # off for a batch: one pass per token
    finally:
        del copier.extend


@pytest.mark.parametrize("kwargs", [dict(method="public"), dict(beta=0.0), dict(epsilon=0.0)])
def test_no_span_text_reaches_the_output_at_epsilon_zero(copier, kwargs):
    res = sanitize(LETTER, spans=SPANS, model=copier, seed=3, **kwargs)
    public = sanitize(LETTER, spans=SPANS, model=copier, method="public", temperature=0).text
    for s in _span_texts(LETTER, SPANS):
        if len(s) > 3 and s not in public:
            assert s not in res.text
    assert "I am writing about my patient" in res.text
    assert all(g.epsilon == 0 for g in res.report.groups)


def test_a_large_budget_lets_private_tokens_through(copier):
    res = sanitize(LETTER, spans=SPANS, model=copier, beta=50.0, seed=0, groups="single")
    # with one group and a huge cap, lambda reaches 1: the copier rewrites the private row
    assert "Helen Marsh" in res.text and res.report.groups[0].epsilon > 100


def test_report_epsilon_equals_the_accountant(tiny):
    res = sanitize(LETTER, spans=SPANS, model=tiny, beta=0.05, alpha=3.0, delta=1e-6, seed=0)
    rep = res.report
    doc_tokens = len(tinylm.tokenizer()(LETTER, add_special_tokens=False)["input_ids"])
    assert rep.max_new_tokens == math.ceil(1.2 * doc_tokens) + 16
    assert [g.label for g in rep.groups] == ["DATETIME", "LOC", "PERSON"]
    assert [g.n_spans for g in rep.groups] == [1, 1, 3]
    for g in rep.groups:
        assert g.beta == 0.05
        assert g.epsilon == dp_fusion_epsilon(alpha=3.0, beta=0.05, groups=3, max_tokens=rep.max_new_tokens,
                                              delta=1e-6)
    assert rep.mechanism == "dp-fusion" and rep.model == "tiny" and rep.alpha == 3.0 and rep.delta == 1e-6
    assert 1 <= rep.tokens_generated <= rep.max_new_tokens
    d = rep.to_dict()
    assert set(d) == {"mechanism", "model", "alpha", "delta", "max_new_tokens", "tokens_generated", "stop_reason",
                      "guarantee", "groups", "decoding", "private_labels", "kept_labels", "spans_source", "incomplete",
                      "accounting", "passages"}
    assert set(d["groups"][0]) == {"label", "n_spans", "n_tokens", "beta", "epsilon", "epsilon_certified"}


def test_diagnostics_only_when_asked_and_never_in_the_release(tiny):
    """The mean lambdas depend on the private text and are not covered by the guarantee: by
    default nothing of them is returned; asked for, they come apart from the report."""
    plain = sanitize(LETTER, spans=SPANS, model=tiny, beta=0.05, alpha=3.0, seed=0)
    asked = sanitize(LETTER, spans=SPANS, model=tiny, beta=0.05, alpha=3.0, seed=0, diagnostics=True)
    assert plain.diagnostics is None and "diagnostics" not in plain.to_dict()["report"]
    assert asked.to_dict() == plain.to_dict()  # the release is the same, byte for byte
    diag = asked.diagnostics
    assert "NOT part of the privacy guarantee" in diag["note"]
    assert set(diag["mean_lambda"]) == {"DATETIME", "LOC", "PERSON"}
    assert all(0 <= v <= 1 for v in diag["mean_lambda"].values())


def test_epsilon_target_is_met_per_group(tiny):
    res = sanitize(LETTER, spans=SPANS, model=tiny, epsilon={"PERSON": 8.0, "LOC": 4.0, "DATETIME": 2.0},
                   max_new_tokens=20, seed=0)
    alpha = res.report.alpha
    assert alpha == choose_alpha([(2.0, 3, 20)], delta=1e-5) and alpha > 2  # 2 cannot reach epsilon 2
    for g in res.report.groups:
        target = {"PERSON": 8.0, "LOC": 4.0, "DATETIME": 2.0}[g.label]
        assert g.epsilon <= target and g.epsilon > 0.99 * target
        assert g.epsilon == dp_fusion_epsilon(alpha=alpha, beta=g.beta, groups=3, max_tokens=20, delta=1e-5)


def test_alpha_choice_maximises_beta():
    from tokendp.accounting import dp_fusion_beta
    from tokendp.fusion import ALPHA_GRID

    best = choose_alpha([(8.0, 6, 200)], delta=1e-5)
    beta = dp_fusion_beta(epsilon=8.0, alpha=best, groups=6, max_tokens=200, delta=1e-5)
    for a in ALPHA_GRID:
        try:
            assert dp_fusion_beta(epsilon=8.0, alpha=a, groups=6, max_tokens=200, delta=1e-5) <= beta
        except InvalidParameterError:
            pass
    with pytest.raises(InvalidParameterError, match="raise epsilon or delta"):
        choose_alpha([(0.01, 1, 100)], delta=1e-9)


def test_batch_with_different_numbers_of_groups(tiny):
    texts = [LETTER, "The court held a hearing in Leeds.", "Please review him in clinic."]
    spans = [SPANS, [Span(28, 33, "LOC")], []]
    res = sanitize_batch(texts, spans=spans, model=tiny, beta=0.1, max_new_tokens=6, seed=1)
    assert [len(r.report.groups) for r in res] == [3, 1, 0]
    assert res[1].report.groups[0].epsilon == dp_fusion_epsilon(alpha=2.0, beta=0.1, groups=1, max_tokens=6,
                                                                delta=1e-5)
    one = sanitize_batch(texts, spans=spans, model=tiny, beta=0.1, max_new_tokens=6, seed=1)
    assert [r.text for r in res] == [r.text for r in one]


def test_a_documents_rewrite_and_report_do_not_depend_on_its_batch(tiny):
    """Each document has its own random stream and its own alpha (chosen from its own targets):
    alone, in a batch, or in another order, it gets the same rewrite and the same report. The
    epsilon targets give the two documents different orders, so one step runs two mechanisms."""
    from tokendp.generation import document_seed

    texts = [LETTER, "The court held a hearing in Leeds on 3 May 2019.", "Please review him in clinic."]
    spans = [SPANS, [Span(28, 33, "LOC"), Span(37, 47, "DATETIME")], []]
    seeds = [document_seed(3, key) for key in ("letter", "court", "clinic")]
    kwargs = dict(model=tiny, epsilon={"PERSON": 1.0, "LOC": 40.0, "DATETIME": 40.0}, max_new_tokens=8,
                  temperature=1.5, speculative=False)
    batch = sanitize_batch(texts, spans=spans, seed=seeds, **kwargs)
    assert batch[0].report.alpha != batch[1].report.alpha
    alone = [sanitize_batch([t], spans=[s], seed=[k], **kwargs)[0] for t, s, k in zip(texts, spans, seeds)]
    backwards = sanitize_batch(texts[::-1], spans=spans[::-1], seed=seeds[::-1], **kwargs)[::-1]
    for one, two, three in zip(batch, alone, backwards):
        assert one.text == two.text == three.text
        assert one.report.alpha == two.report.alpha and one.report.groups == two.report.groups == three.report.groups
    assert len({r.text for r in batch}) == 3
    assert sanitize(texts[1], spans=spans[1], seed=3, **kwargs).text == sanitize_batch(
        texts[1:2], spans=spans[1:2], seed=[document_seed(3, 0)], **kwargs)[0].text  # an int seed: document i's stream is (seed, i)


def test_document_seeds_are_stable_across_processes_and_versions():
    """A resumed or distributed run must derive the same stream for the same document: a fixed
    function of (seed, key), not Python's salted hash. Changing these values changes every seeded output."""
    from tokendp.generation import document_seed, make_generators

    assert document_seed(0, "doc-1") == document_seed(0, "doc-1") != document_seed(0, "doc-2")
    assert document_seed(0, 1) != document_seed(0, "1") != document_seed(1, "1")
    assert (document_seed(0, "doc-1"), document_seed(7, 42)) == (9020800509724188497, 4249147402985306285)
    assert 0 <= document_seed(2**70, "x") < 2**63
    with pytest.raises(InvalidParameterError, match="one int per document"):
        make_generators([1, 2], 3)


def test_seeded_runs_repeat(tiny):
    a = sanitize(LETTER, spans=SPANS, model=tiny, beta=0.2, max_new_tokens=10, seed=5)
    b = sanitize(LETTER, spans=SPANS, model=tiny, beta=0.2, max_new_tokens=10, seed=5)
    assert a.text == b.text and a.report == b.report


def test_bad_parameters(tiny):
    with pytest.raises(InvalidParameterError, match="exactly one of beta= or epsilon="):
        sanitize(LETTER, spans=SPANS, model=tiny)
    with pytest.raises(InvalidParameterError, match="exactly one"):
        sanitize(LETTER, spans=SPANS, model=tiny, beta=0.1, epsilon=1.0)
    with pytest.raises(InvalidParameterError, match="greedy"):
        sanitize(LETTER, spans=SPANS, model=tiny, beta=0.1, temperature=0)
    with pytest.raises(InvalidParameterError, match="alpha"):
        sanitize(LETTER, spans=SPANS, model=tiny, beta=0.1, alpha=1.0)
    with pytest.raises(InvalidParameterError, match="is not above"):
        sanitize(LETTER, spans=SPANS, model=tiny, epsilon=8.0, alpha=2.0)
    with pytest.raises(InvalidParameterError, match="method"):
        sanitize(LETTER, spans=SPANS, model=tiny, method="magic")
    corpus_wide = {"PERSON": 1.0, "LOC": 1.0, "DATETIME": 1.0, "ORG": 1.0}  # ORG: a label this document lacks
    res = sanitize(LETTER, spans=SPANS, model=tiny, epsilon=corpus_wide, max_new_tokens=2, seed=0)
    assert sorted(g.label for g in res.report.groups) == ["DATETIME", "LOC", "PERSON"]
    with pytest.raises(InvalidInputError, match="LOC"):
        sanitize(LETTER, spans=SPANS, model=tiny, epsilon={"PERSON": 1.0, "DATETIME": 1.0})


def test_bad_inputs_never_echo_private_text(tiny):
    with pytest.raises(InvalidInputError, match="empty"):
        sanitize("  \n", spans=[], model=tiny, beta=0.1)
    with pytest.raises(InvalidInputError, match="past the end") as err:
        sanitize(LETTER, spans=[Span(54, 500, "PERSON")], model=tiny, beta=0.1)
    assert "Lindqvist" not in str(err.value)
    small = HFBackend(tinylm.model(max_positions=64), tinylm.tokenizer(), options=OPTIONS)
    with pytest.raises(InvalidInputError, match="context of 64 tokens") as err:
        sanitize(LETTER * 3, spans=SPANS, model=small, beta=0.1)
    assert "Lindqvist" not in str(err.value)
    with pytest.raises(InvalidParameterError, match="max_new_tokens"):  # T alone cannot fit: a usage error
        sanitize("Short text.", spans=[], model=small, beta=0.1, max_new_tokens=100)


def test_streaming_callback_and_package_export(tiny):
    import tokendp

    seen = []
    res = tokendp.sanitize(LETTER, spans=SPANS, model=tiny, beta=0.1, max_new_tokens=5, seed=0,
                           on_token=lambda doc, tok: seen.append((doc, tok)))
    assert len(seen) == res.report.tokens_generated and {d for d, _ in seen} == {0}
    assert isinstance(res, tokendp.SanitizeResult)


def test_public_decoding_constraints_are_reported_and_cost_nothing(tiny):
    plain = sanitize(LETTER, spans=SPANS, model=tiny, beta=0.05, alpha=2.0, delta=1e-6, seed=0)
    ids: list[int] = []
    res = sanitize_batch([LETTER], spans=[SPANS], model=tiny, beta=0.05, alpha=2.0, delta=1e-6, seed=0,
                         no_repeat_ngram_size=2, repetition_penalty=1.3, on_token=lambda doc, tok: ids.append(tok))[0]
    assert res.report.decoding == {"temperature": 0.7, "no_repeat_ngram_size": 2, "repetition_penalty": 1.3,
                                   "stop_at_repeated_line": DEFAULT_STOP_AT_REPEATED_LINE}
    assert plain.report.decoding["no_repeat_ngram_size"] == DEFAULT_NO_REPEAT_NGRAM_SIZE  # on unless turned off
    assert [g.epsilon for g in res.report.groups] == [g.epsilon for g in plain.report.groups]
    pairs = list(zip(ids, ids[1:]))
    assert len(ids) > 10 and len(pairs) == len(set(pairs))  # no bigram released twice
    with pytest.raises(InvalidParameterError):
        sanitize(LETTER, spans=SPANS, model=tiny, beta=0.05, repetition_penalty=0.0)
    with pytest.raises(InvalidParameterError, match="stop_at_repeated_line"):
        sanitize(LETTER, spans=SPANS, model=tiny, beta=0.05, stop_at_repeated_line="yes")


def test_labels_and_keep_say_what_is_protected(copier):
    """Protecting is the default and keeping explicit: keep= releases its labels' spans as plain
    text (even the public rewrite shows them) and the report counts them; with labels=, a label
    of the input named in neither list is refused, never released, and so is a protected name
    that matches no span (issue: --labels PERSON,CODE,DATE released the DATETIME spans)."""
    with pytest.raises(InvalidParameterError, match=r"DATETIME \(1 span\), LOC \(1 span\) are neither") as err:
        sanitize(LETTER, spans=SPANS, model=copier, method="public", temperature=0, labels="person")
    assert "1961" not in str(err.value) and "Leeds" not in str(err.value)
    res = sanitize(LETTER, spans=SPANS, model=copier, method="public", temperature=0, labels="person",
                   keep="DATETIME,LOC")
    assert "1961" in res.text and "Leeds" in res.text  # DATETIME and LOC kept public
    assert "Helen Marsh" not in res.text and "Lindqvist" not in res.text
    assert [g.label for g in res.report.groups] == ["PERSON"]
    assert res.report.private_labels == ("PERSON",) and res.report.kept_labels == {"DATETIME": 1, "LOC": 1}
    assert json.loads(json.dumps(res.to_dict()))["report"]["private_labels"] == ["PERSON"]
    kept = sanitize(LETTER, spans=SPANS, model=copier, method="public", temperature=0, keep="loc")
    assert kept.report.private_labels is None and "Leeds" in kept.text and "1961" not in kept.text
    every = sanitize(LETTER, spans=SPANS, model=copier, method="public", temperature=0)
    assert every.report.kept_labels == {} and "Leeds" not in every.text
    # a parent covers its finer labels, but a finer name never covers the parent's spans
    with pytest.raises(InvalidParameterError, match=r"DATETIME \(1 span\) are neither"):
        sanitize(LETTER, spans=SPANS, model=copier, method="public", labels="PERSON,CODE,DATE", keep="LOC")
    own = [*SPANS[:2], Span(79, 83, "DATE"), Span(98, 103, "WARD")]
    res = sanitize(LETTER, spans=own, model=copier, method="public", temperature=0, labels=["DATETIME", "ward"],
                   keep="PERSON")
    assert "1961" not in res.text and "Leeds" not in res.text and "Helen Marsh" in res.text
    assert res.report.private_labels == ("DATETIME", "WARD")
    assert sorted(g.label for g in res.report.groups) == ["DATE", "WARD"]
    with pytest.raises(InvalidParameterError, match="CODE, which matches no span"):
        sanitize(LETTER, spans=SPANS, model=copier, method="public", labels="PERSON,CODE", keep="DATETIME,LOC")
    with pytest.raises(InvalidParameterError, match="both protected"):
        sanitize(LETTER, spans=SPANS, model=copier, method="public", labels="PERSON", keep="person")


@pytest.mark.parametrize("labels", ["PERSN", ["PERSON", "Leeds"], "", " , ", "PERSON,DATETIME,LOC,DATE"])
def test_unknown_labels_fail_before_the_model_loads(labels):
    with pytest.raises(InvalidParameterError, match="labels") as err:
        sanitize(LETTER, spans=SPANS, model="no-such-model", epsilon=8, labels=labels)
    assert "no-such-model" not in str(err.value)


def test_the_source_ends_on_its_last_word(copier):
    """Trailing whitespace is trimmed before the rows are built (the rewriter never saw it in
    training, and it made rewrites end early); spans are cut to the end, whitespace-only ones
    dropped, and one past the end of the text is still refused."""
    from tokendp.jobs.sanitize import trim_end

    text = LETTER + "\n\n"
    body, spans = trim_end(text, [*SPANS, Span(121, len(LETTER) + 1, "PERSON"), Span(len(LETTER), len(text), "X")])
    assert body == LETTER and spans == [*SPANS, Span(121, len(LETTER), "PERSON")]
    assert trim_end(LETTER, SPANS) == (LETTER, SPANS) and trim_end(" \n", []) == (" \n", [])
    res = sanitize(text, spans=SPANS, model=copier, method="original", temperature=0)
    assert res.text == LETTER and res.report.stop_reason == "eos"
    with pytest.raises(InvalidInputError, match="past the end"):
        sanitize(text, spans=[Span(121, len(text) + 1, "PERSON")], model=copier, beta=0.1)


def test_the_public_and_original_reports_name_no_order(copier):
    """Issue 33, item 8: alpha is a parameter of the DP-Fusion bound only."""
    for method in ("public", "original"):
        res = sanitize(LETTER, spans=SPANS, model=copier, method=method, temperature=0)
        assert res.report.alpha is None and res.report.to_dict()["alpha"] is None


def test_a_span_past_the_end_is_refused_before_the_model_loads():
    with pytest.raises(InvalidInputError, match="past the end"):
        sanitize("Dr Helen Marsh wrote.", spans=[{"start": 3, "end": 500, "label": "PERSON"}],
                         model="no-such-model", epsilon=8)
