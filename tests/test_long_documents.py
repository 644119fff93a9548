"""Documents of any length (issue 34, item 5): passages cut at public places, each reading the
previous passage and its released rewrite, one ledger or filter row per document across the
passages, one certificate per document, rows bounded by two passages, not the document."""

from __future__ import annotations

import math

import pytest
import tinylm

import tokendp
from tokendp import generation, long_documents
from tokendp.accounting import dp_fusion_epsilon, dp_fusion_filter_budget
from tokendp.fusion import Chunk, run_fusion
from tokendp.jobs.config import SanitizeConfig
from tokendp.jobs.sanitize import prepare_sanitize, run_sanitize, sanitize_stream
from tokendp.text.contexts import covered, token_offsets
from tokendp.text.passages import public_pieces, split_passages
from tokendp.text.spans import Span

OPTIONS = {"prompt_template": "<|doc|>{document}<|rewrite|>", "placeholder": "<|mask|>"}
NAMES = (("Helen Marsh", "PERSON"), ("Tomas Lindqvist", "PERSON"), ("Leeds", "LOC"))


def letter(paragraphs: int = 10, names: tuple = NAMES) -> tuple[str, list[Span]]:
    text = "\n\n".join(f"Paragraph {i}: Dr {names[0][0]} saw Mr {names[1][0]} in {names[2][0]}. They spoke a while."
                       for i in range(paragraphs))
    spans = []
    for name, label in names:
        at = 0
        while (j := text.find(name, at)) >= 0:
            spans.append(Span(j, j + len(name), label))
            at = j + 1
    return text, sorted(spans)


def pieces(text: str, spans: list[Span]) -> list:
    """The public row of ``text`` as :func:`split_passages` reads it (the tiny tokenizer)."""
    _, starts, ends = token_offsets(tinylm.tokenizer(), text)
    return public_pieces(text, starts, ends, covered(starts, ends, spans))


def test_passages_cut_at_line_breaks_outside_spans_and_cover_the_text():
    text, spans = letter(6)
    row = pieces(text, spans)
    passages = split_passages(row, 100)  # two paragraphs (47 tokens each) a passage
    assert len(passages) > 1 and passages[0].start == 0 and passages[-1].end == len(row)
    for before, after in zip(passages, passages[1:]):
        assert after.separator == "\n\n" and all(p and p.isspace() for p in row[before.end:after.start])
    for p in passages:
        assert p.end - p.start <= 100 and row[p.start] is not None and not row[p.start].isspace()
        assert "".join(x for x in row[p.start:p.end] if x).startswith("Paragraph")


def test_a_long_paragraph_is_cut_at_sentence_ends_then_spaces_never_inside_a_span():
    text = ("One two three four five six seven eight. Nine ten eleven twelve thirteen fourteen. Anna Maria Smith "
            "fifteen sixteen seventeen eighteen nineteen twenty twenty-one. Twenty-two words here now end.")
    spans = [Span(text.index("Anna"), text.index("Smith") + 5, "PERSON")]
    row = pieces(text, spans)
    passages = split_passages(row, 16)
    assert len(passages) > 2
    hidden = [j for j, x in enumerate(row) if x is None]
    assert any(p.start <= hidden[0] and hidden[-1] < p.end for p in passages)  # the name stays in one passage
    assert any("".join(x for x in row[p.start:p.end] if x).endswith(".") for p in passages)
    assert all(p.separator == " " for p in passages[1:])


def test_a_long_document_is_rewritten_whole_passage_by_passage_and_leaks_nothing():
    """The perfect copier rewrites each passage's public row: the release covers the whole
    document, joined by the public text between passages, with no hidden name."""
    copier = tinylm.backend(OPTIONS, copier=True)
    text, spans = letter(10)
    res = tokendp.sanitize(text, spans=spans, model=copier, method="public", temperature=0, passage_tokens=48)
    assert res.report.passages > 2 and not res.report.incomplete
    assert "Paragraph 0" in res.text and "Paragraph 9" in res.text and res.text.count("\n\n") >= 9
    for name, _ in NAMES:
        assert name not in res.text
    whole = tokendp.sanitize(text, spans=spans, model=copier, method="public", temperature=0, passage_tokens=None)
    assert whole.report.passages == 1


def test_one_certificate_per_document_over_all_its_passages():
    tiny = tinylm.backend(OPTIONS)
    text, spans = letter(10)
    config = SanitizeConfig(epsilon=8.0, alpha=4.0, passage_tokens=48)
    prepared = prepare_sanitize([text], spans=[spans], model=tiny, config=config)
    (doc,) = prepared.documents
    assert doc.long is not None and doc.max_new_tokens == sum(doc.long.tokens)
    (res,) = run_sanitize(prepared, seed=[0])
    for g in res.report.groups:  # the fixed accounting over every passage's T_k, the document's m groups
        assert g.epsilon == dp_fusion_epsilon(alpha=4.0, beta=g.beta, groups=2, max_tokens=doc.max_new_tokens,
                                              delta=1e-5) <= 8
    filtered = prepare_sanitize([text], spans=[spans], model=tiny, config=config.replace(accounting="filter"))
    job, (out,) = run_fusion(filtered, seed=[0])
    budget = dp_fusion_filter_budget(epsilon=8.0, alpha=4.0, delta=1e-5)
    remaining = job.filter.remaining[0, :2]
    assert bool((remaining >= 0).all()) and bool((remaining < budget).all())  # one budget spent across passages


def test_rows_stay_bounded_by_two_passages(monkeypatch):
    tiny = tinylm.backend(OPTIONS)
    text, spans = letter(30)
    lengths = []
    real = generation.generate

    def recording(backend, sequences, *args, **kwargs):
        lengths.append(max(len(s.rows[0].ids) for s in sequences))
        return real(backend, sequences, *args, **kwargs)

    monkeypatch.setattr(long_documents, "generate", recording)
    res = tokendp.sanitize(text, spans=spans, model=tiny, epsilon=8, seed=1, passage_tokens=48)
    document = len(tinylm.tokenizer()(text, add_special_tokens=False)["input_ids"])
    assert res.report.passages == len(lengths) > 5
    assert max(lengths) <= 2 * 48 + math.ceil(1.2 * 48) + 16 + 8 < document


def test_continuous_batching_decodes_a_long_document_in_passages():
    tiny = tinylm.backend(OPTIONS)
    long_text, long_spans = letter(8)
    short = "Dr Helen Marsh wrote."
    config = SanitizeConfig(epsilon=8.0, passage_tokens=48, max_new_tokens=None)
    chunk = Chunk(prepare_sanitize([short, long_text], spans=[[Span(3, 14, "PERSON")], long_spans], model=tiny,
                                   config=config), ("short", "long"), (5, 6))
    streamed = dict(sanitize_stream([chunk], slots=2))
    (alone,) = run_sanitize(prepare_sanitize([long_text], spans=[long_spans], model=tiny, config=config), seed=[6])
    assert streamed["long"].to_dict() == alone.to_dict() and streamed["long"].report.passages > 1
    assert set(streamed) == {"short", "long"}


@pytest.mark.parametrize("value", [0, 8, -1, 2.5])
def test_passage_tokens_is_checked_before_anything_loads(value):
    with pytest.raises(tokendp.errors.InvalidParameterError, match="passage_tokens"):
        tokendp.sanitize("text", spans=[], model="no-such-model", epsilon=8, passage_tokens=value)
