"""Rewriter training data that teaches endings (issue 28, docs/sanitize.md "Endings"): examples of
several paragraphs, letters and e-mails ending on their closing, a few trailing newlines, answers
ending on the chat template's end of turn; and the held-out endings check of the training script."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
import torch
from repo_scripts import load_script

pytest.importorskip("faker")

from tokendp.models.training.rewriter import (  # noqa: E402
    MULTI, TRAILING, RewriteExample, RewriterStream, end_of_turn, join_paragraphs, tab_passages,
    tiny_model_and_tokenizer)
from tokendp.models.training.synthetic import SyntheticDocs  # noqa: E402
from tokendp.text.spans import Span  # noqa: E402

torch.set_num_threads(1)

# SmolLM2-135M-Instruct's chat template, as its GGUF (and the converted model directory) holds it.
CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
          "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
CLOSING = re.compile(r"^(Yours sincerely|Yours faithfully|Kind regards|Best regards),\n\S")
SALUTATION = re.compile(r"^(Dear|Hello|Hi) ")
MAX = 60


def chatml_tokenizer(eos: str):
    """A small byte-level BPE with SmolLM2's special tokens and chat template; ``eos`` as given
    (transformers 4.x converts SmolLM2's GGUF with ``<|im_start|>``, its BOS, as EOS)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    synth = SyntheticDocs(0)
    tok.train_from_iterator([synth.paragraphs(6, 3).text for _ in range(60)], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, bos_token="<|im_start|>",
                                   unk_token="<|endoftext|>")
    fast.chat_template = CHATML
    return fast


DOC = [("THE FACTS", []),
       ("The applicant, Mr Lindqvist, was born in 1961 and lives in Leeds.",
        [Span(15, 27, "PERSON"), Span(41, 45, "DATETIME"), Span(59, 64, "LOC")]),
       ("On 2 June 2004 the Regional Court of Leeds dismissed his appeal.",
        [Span(3, 14, "DATETIME"), Span(19, 42, "ORG")]),
       ("The judgment became final on 9 May 2005.", [Span(29, 39, "DATETIME")]),
       ("Ms Anna Kovacs, his lawyer, appealed.", [Span(0, 14, "PERSON")])]


def _answer(tok, e: RewriteExample) -> str:
    return tok.decode(e.ids[e.n_prompt:])


@pytest.mark.parametrize("eos", ["<|im_end|>", "<|im_start|>"])
def test_answers_end_on_the_chat_templates_end_of_turn_whatever_the_tokenizers_eos(eos):
    tok = chatml_tokenizer(eos)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert end_of_turn(tok) == im_end
    stream = RewriterStream(tok, tab=[p for p in DOC if p[1]], passages=tab_passages([DOC], min_chars=20, max_chars=400),
                            wiki=["A sentence about Paris and Berlin in 1990. " * 6], seed=3, max_tokens=2000)
    for e in stream.batch(40):
        assert e.ids[-1] == im_end and e.ids[-2] != im_end  # one end of turn, right after the answer
        assert tok.decode(e.ids[:e.n_prompt]).endswith("<|im_end|>\n<|im_start|>assistant\n")
    _, tiny = tiny_model_and_tokenizer()
    assert end_of_turn(tiny) == tiny.eos_token_id  # its template writes nothing after an answer


def test_the_converted_smollm2_ends_its_answers_on_im_end():
    from transformers import AutoTokenizer

    from tokendp.models.cache import SMOLLM2, cache_dir

    path = cache_dir(SMOLLM2)
    if not (path / "tokenizer.json").is_file():
        pytest.skip("the converted SmolLM2 is not cached")
    tok = AutoTokenizer.from_pretrained(path)
    e = RewriterStream(tok, tab=[], wiki=[], seed=1).example("synth_fill")
    assert e.ids[-1] == end_of_turn(tok) == tok.convert_tokens_to_ids("<|im_end|>")


def test_passages_join_consecutive_paragraphs_and_keep_their_spans():
    text, spans = join_paragraphs(DOC[1:3])
    assert text == DOC[1][0] + "\n\n" + DOC[2][0]
    assert [text[s.start:s.end] for s in spans] == ["Mr Lindqvist", "1961", "Leeds", "2 June 2004",
                                                    "Regional Court of Leeds"]
    passages = tab_passages([DOC], min_chars=20, max_chars=200)
    assert passages and all(1 <= t.count("\n\n") <= 3 and 20 <= len(t) <= 200 for t, _ in passages)
    assert (DOC[0][0] + "\n\n" + DOC[1][0], join_paragraphs(DOC[:2])[1]) in passages


def test_a_passage_is_shown_as_the_engine_shows_it_and_its_answer_keeps_the_paragraphs():
    from tokendp.text.contexts import PromptTemplate, build_contexts, placeholders

    _, tok = tiny_model_and_tokenizer()
    text, spans = join_paragraphs(DOC[1:4])
    options = {"placeholder_style": "typed"}
    stream = RewriterStream(tok, tab=[DOC[1]], passages=[(text, spans)], wiki=[], seed=0, options=options)
    e = next(e for e in iter(lambda: stream.example("tab_fill"), None) if "\n\n" in _answer(tok, e))
    prompt, answer = tok.decode(e.ids[:e.n_prompt]), _answer(tok, e)
    source = text + "\n" if prompt.endswith("\n<|rewrite|>") else text
    public = build_contexts(source, spans, tok, template=PromptTemplate((), ()),
                            placeholder=placeholders(tok, options=options)).rows[0]
    assert list(stream.template.wrap(public)) == e.ids[:e.n_prompt]  # labels public, one marker a token
    assert "Lindqvist" not in prompt and "<|PERSON|>" in prompt and prompt.count("\n\n") == 3  # 1 in the instruction
    assert answer.count("\n\n") == 2 and answer.split("\n\n")[-1].startswith("The judgment became final on ")
    assert re.search(r"\.\n?<\|end\|>$", answer) and "Lindqvist" not in answer


def test_a_share_of_tab_and_synthetic_examples_are_several_paragraphs():
    _, tok = tiny_model_and_tokenizer()
    stream = RewriterStream(tok, tab=[p for p in DOC if p[1]], passages=tab_passages([DOC], min_chars=20, max_chars=400),
                            wiki=[], seed=5, max_tokens=2000)
    tab = [_answer(tok, stream.example("tab_fill")) for _ in range(200)]
    share = sum("\n\n" in a for a in tab) / len(tab)
    assert abs(share - MULTI) < 0.1
    synth = [_answer(tok, stream.example("synth_fill")) for _ in range(200)]
    assert 0.35 < sum("\n\n" in a for a in synth) / len(synth) < 0.75  # every letter and e-mail, MULTI of the others


def test_letters_and_emails_open_on_a_salutation_and_end_on_their_closing():
    synth = SyntheticDocs(11)
    docs = [synth.paragraphs(6, 1 + i % 3) for i in range(120)]
    letters = [d for d in docs if SALUTATION.match(d.text)]
    assert len(letters) > 20
    for d in letters:
        paragraphs = d.text.split("\n\n")
        assert len(paragraphs) >= 3 and CLOSING.match(paragraphs[-1])
        assert not any(CLOSING.match(p) or "Yours" in p for p in paragraphs[:-1])
        assert d.spans[-1].end == len(d.text)  # the signature is the document's last line
    others = [d for d in docs if not SALUTATION.match(d.text)]
    assert not any("Yours" in d.text or "Dear" in d.text for d in others)


def test_a_few_sources_and_their_targets_keep_a_trailing_newline():
    _, tok = tiny_model_and_tokenizer()
    stream = RewriterStream(tok, tab=[p for p in DOC if p[1]], wiki=["A sentence about Paris and Berlin in 1990. " * 6],
                            seed=2, max_tokens=2000)
    examples = stream.batch(600)
    trailing = [e for e in examples if tok.decode(e.ids[:e.n_prompt]).endswith("\n<|rewrite|>")]
    assert 0.5 * TRAILING < len(trailing) / len(examples) < 2 * TRAILING
    assert all(_answer(tok, e).endswith("\n<|end|>") for e in trailing)
    assert not any(_answer(tok, e).endswith("\n<|end|>") for e in examples if e not in trailing)


def test_a_cut_answer_has_no_end_of_turn():
    _, tok = tiny_model_and_tokenizer()
    long = RewriterStream(tok, tab=[], wiki=[], seed=4, max_tokens=2000)
    short = RewriterStream(tok, tab=[], wiki=[], seed=4, max_tokens=MAX)  # the same draws, cut at MAX
    frame = len(long.template.before) + len(long.template.after)
    ends = []
    for whole, maybe_cut in zip(long.batch(30), short.batch(30)):
        assert whole.ids[-1] == long.end
        source, target = whole.n_prompt - frame, len(whole.ids) - whole.n_prompt - 1
        ends.append(maybe_cut.ids[-1] == short.end)
        assert ends[-1] == (source <= MAX and target <= MAX + 8)
    assert any(ends) and not all(ends)


class EndsAfter(torch.nn.Module):
    """Predicts ``end`` after the token ``word`` and token 0 after any other."""

    def __init__(self, vocab: int, end: int, word: int) -> None:
        super().__init__()
        self.vocab, self.end, self.word = vocab, end, word
        self.unused = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids):
        logits = torch.zeros(*input_ids.shape, self.vocab)
        logits[0, -1, self.end if int(input_ids[0, -1]) == self.word else 0] = 1.0
        return SimpleNamespace(logits=logits)


def test_the_endings_check_reads_the_token_after_the_answers_last_token():
    script = load_script("scripts/train_rewriter.py")
    _, tok = tiny_model_and_tokenizer()
    end, word, other = tok.eos_token_id, 40, 41
    examples = [RewriteExample("x", [5, 6, 7, *answer, end], 3) for answer in ([8, word], [word, other], [word], [other])]
    model = EndsAfter(len(tok), end, word).train()
    assert script.likeliest_after_answer(model, examples) == [end, 0, end, 0]
    assert script.ending_share(model, tok, examples) == 0.5 and model.training  # its mode is restored


def test_the_endings_check_runs_on_a_tiny_model_and_a_smoke_run_records_it(tmp_path):
    script = load_script("scripts/train_rewriter.py")
    model, tok = script.tiny_model_and_tokenizer()
    cfg = script.Config(tab="", wikitext="", max_tokens=64, end_check=6)
    held = script.held_out_examples(tok, cfg, {}, tab=[DOC], wiki=[])
    assert len(held) == 6 and all(e.ids[-1] == tok.eos_token_id for e in held)
    assert held == script.held_out_examples(tok, cfg, {}, tab=[DOC], wiki=[])  # the same for a seed
    assert 0.0 <= script.ending_share(model, tok, held) <= 1.0
    adapter = script.smoke(str(tmp_path / "run"), steps=2)
    info = json.loads((adapter / "training.json").read_text())
    assert info["endings"]["examples"] == 4 and 0.0 <= info["endings"]["share"] <= 1.0
    assert info["endings"]["end_of_turn"] == "<|end|>" and info["multi_paragraph"] == MULTI
    base, tok = script.tiny_model_and_tokenizer()
    share = script.check_endings(adapter, script.Config(tab="", wikitext="", max_tokens=64, end_check=3),
                                 base=base, tokenizer=tok)  # --check-endings, on the tiny base
    assert 0.0 <= share <= 1.0


def test_held_out_keeps_the_last_items_out_of_training_when_there_are_enough():
    script = load_script("scripts/train_rewriter.py")
    assert script.held_out(list(range(10)), 2) == (list(range(8)), [8, 9])
    assert script.held_out(list(range(7)), 2) == (list(range(7)), [])
