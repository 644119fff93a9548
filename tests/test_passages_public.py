"""Planning is public (issue 44; docs/privacy.md, "Documents of any length"): two documents with
the same public row and different span contents get the same plan: the same passages, the same
T and T_k, the same public part of every passage's prompt and the same certificate, under both
accountings and at several ``passage_tokens``.

The span contents are chosen to end in punctuation, hold newlines, spaces, quotes, brackets and
digits: before, a span's last character decided whether a sentence ended there. With a tokenizer
without merges (one token per byte) a document's public row is fixed by the text outside the
spans and the spans' byte lengths, so every pair drawn below has identical public rows; the BPE
tokenizer's pairs are checked to have them."""

from __future__ import annotations

import functools

import pytest
import tinylm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokendp.backends import HFBackend
from tokendp.jobs.config import SanitizeConfig
from tokendp.jobs.sanitize import prepare_sanitize
from tokendp.long_documents import split_tokens
from tokendp.text.spans import Span

OPTIONS = {"prompt_template": "<|doc|>{document}<|rewrite|>", "placeholder": "<|mask|>"}
TRICKY = ".!?;:\"')]([ \n\t0123456789-,"
# The public text: sentences and paragraphs with a slot {} for each span.
FRAME = ("The board met on Monday and the minutes were read aloud by {} Then the chair closed the meeting. "
         "Later that week {} wrote to the members.\n\nA second paragraph names {} and the address {} in full; "
         "it ends here. Then a third sentence follows, with more words to cut at spaces if need be, {} and "
         "so on.\n\nThe last paragraph: {} ends the letter.")
LABELS = ("ORG", "PERSON", "PERSON", "LOC", "CODE", "DATETIME")


@functools.lru_cache(maxsize=None)
def bytes_backend() -> HFBackend:
    """The tiny model on a tokenizer with no merges: one token per byte."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=len(alphabet) + len(tinylm.SPECIAL), special_tokens=tinylm.SPECIAL,
                                  show_progress=False, initial_alphabet=alphabet)
    tok.train_from_iterator(["a"], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    return HFBackend(tinylm.model(max_positions=2048, vocab=len(fast)), fast, name="bytes", options=OPTIONS)


def document(contents: list[str]) -> tuple[str, list[Span]]:
    text, spans, rest = "", [], FRAME.split("{}")
    for part, content, label in zip(rest, contents, LABELS):
        text += part
        spans.append(Span(len(text), len(text) + len(content), label))
        text += content
    return text + rest[-1], spans


def plan(backend: HFBackend, contents: list[str], config: SanitizeConfig) -> dict:
    """Everything a job decides before its first token, as comparable values."""
    text, spans = document(contents)
    prepared = prepare_sanitize([text], spans=[spans], model=backend, config=config)
    (doc,) = prepared.documents
    out = {"T": doc.max_new_tokens, "certificate": doc.groups, "row": doc.context.rows[0]}
    if doc.long is not None:
        history, released = prepared.history, (7, 8, 9)
        out["passages"] = doc.long.passages
        out["T_k"] = doc.long.tokens
        out["prompts"] = [doc.long.contexts(k, doc.context.groups, history, doc.long.rows[0][:3], released).rows[0]
                          for k in range(len(doc.long.passages))]
    return out


def contents_of(lengths: list[int]):
    """Span contents of the given lengths, from characters that end sentences and make gaps."""
    return st.tuples(*(st.text(alphabet=TRICKY + "AbcXyz", min_size=n, max_size=n) for n in lengths))


CONFIGS = [SanitizeConfig(epsilon=8.0, passage_tokens=p, accounting=a, max_new_tokens=t)
           for p, a, t in ((16, "fixed", None), (24, "filter", None), (40, "fixed", 400), (64, "filter", 90))]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lengths=st.lists(st.integers(1, 12), min_size=len(LABELS), max_size=len(LABELS)), data=st.data())
def test_documents_with_the_same_public_row_get_the_same_plan(lengths, data):
    backend = bytes_backend()
    a = list(data.draw(contents_of(lengths)))
    b = list(data.draw(contents_of(lengths)))
    for config in CONFIGS:
        first, second = plan(backend, a, config), plan(backend, b, config)
        assert first["row"] == second["row"]  # neighbours under DP-Fusion's adjacency
        assert first == second


def test_the_span_that_ends_in_a_full_stop_no_longer_cuts():
    """The issue's own case: "Acme Ltd." against "Acme Ltdx" as one ORG span, passage_tokens 16."""
    backend = bytes_backend()
    config = SanitizeConfig(epsilon=8.0, passage_tokens=16)
    rest = ["Jo", "Al", "Kyiv", "12", "Mon"]
    assert plan(backend, ["Acme Ltd.", *rest], config) == plan(backend, ["Acme Ltdx", *rest], config)


@pytest.mark.parametrize("pair", [("Acme Ltd.", "Acme Ltdx"), ("Smith (", "Smith A"), ("Leeds\n", "Leeds ")])
def test_bpe_neighbours_get_the_same_plan(pair):
    """With a BPE tokenizer, a pair whose public rows agree is planned alike."""
    backend = tinylm.backend(OPTIONS)
    rest = ["Jo", "Al", "Kyiv", "12", "Mon"]
    for config in CONFIGS:
        first, second = plan(backend, [pair[0], *rest], config), plan(backend, [pair[1], *rest], config)
        if first["row"] == second["row"]:
            assert first == second


@given(total=st.integers(1, 5000), sizes=st.lists(st.integers(1, 400), min_size=1, max_size=30))
def test_t_is_split_exactly(total, sizes):
    if total < len(sizes):
        with pytest.raises(Exception, match=f"at least {len(sizes)}"):
            split_tokens(total, sizes)
        return
    tokens = split_tokens(total, sizes)
    assert sum(tokens) == total and min(tokens) >= 1
    rest, whole = total - len(sizes), sum(sizes)
    for t, s in zip(tokens, sizes):  # largest remainder: within one of the exact share
        assert abs((t - 1) - rest * s / whole) < 1
