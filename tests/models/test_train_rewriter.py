"""The rewriter training data (typed fillers, chat-template examples) and the resumable script."""

from __future__ import annotations

import json
import random
import re

import pytest
import torch
from repo_scripts import load_script

pytest.importorskip("faker")
torch.set_num_threads(1)


def _script():
    return load_script("scripts/train_rewriter.py")


def test_coherent_fillers_are_consistent_distinct_and_shaped():
    from tokendp.models.training.coherent import CoherentFillers
    from tokendp.models.training.synthetic import SyntheticDocs
    from tokendp.text.spans import Span

    text = "Mr Durdu and Ms Marta Kowalska met on 30 May 1996 (no. 36110/97), Mr Durdu said; Turkish."
    spans = [Span(0, 8, "PERSON"), Span(13, 30, "PERSON"), Span(38, 49, "DATETIME"), Span(55, 63, "CODE"),
             Span(66, 74, "PERSON"), Span(81, 88, "DEM")]
    fill = CoherentFillers(SyntheticDocs(3), random.Random(3), text, spans)
    a, b = fill(0), fill(1)
    assert a.startswith("Mr ") and b.split()[0] in ("Ms", "Mrs") and a != b and a != "Mr Durdu"
    assert fill(4) == a  # the same entity keeps its filler
    date = fill(2)
    assert re.fullmatch(r"\d{1,2} [A-Z][a-z]+ (19|20)\d\d", date) and date != "30 May 1996"
    assert re.fullmatch(r"\d{5}/\d{2}", fill(3))
    assert fill(5)[0].isupper()


def test_examples_hide_every_span_token_and_copy_the_rest():
    from tokendp.models.training.rewriter import RewriterStream, tiny_model_and_tokenizer
    from tokendp.text.spans import Span

    _, tok = tiny_model_and_tokenizer()
    text = "The applicant, Mr Lindqvist, was born in 1961 and lives in Leeds."
    spans = [Span(15, 27, "PERSON"), Span(41, 45, "DATETIME"), Span(59, 64, "LOC")]
    stream = RewriterStream(tok, tab=[(text, spans)], wiki=[], seed=1)
    e = stream.example("tab_fill")
    prompt = tok.decode(e.ids[:e.n_prompt])
    answer = tok.decode(e.ids[e.n_prompt:])
    assert "Lindqvist" not in prompt and "1961" not in prompt and "Leeds" not in prompt
    assert prompt.startswith("<|doc|>Paraphrase the following text.") and prompt.endswith("<|rewrite|>")
    assert "_" in prompt and answer.startswith("The applicant,") and answer.endswith("<|end|>")
    assert "Lindqvist" not in answer and " and lives in " in answer
    copy = stream.example("tab_copy")
    assert tok.decode(copy.ids[copy.n_prompt:]) == text + "<|end|>"


def test_smoke_run_checkpoints_resumes_and_exports_a_small_adapter(tmp_path):
    from safetensors.torch import load_file

    from tokendp.errors import InvalidInputError

    script = _script()
    model, tok = script.tiny_model_and_tokenizer()
    cfg = script.Config(out=str(tmp_path / "run"), base_name="tiny", tab="", wikitext="", steps=3, batch=2,
                        warmup=1, r=4, alpha=8, max_tokens=48, checkpoint_every=3, log_every=1)
    script.train(cfg, model=model, tokenizer=tok, tab=[], wiki=[])
    assert sorted(p.name for p in (tmp_path / "run").glob("*.pt")) == ["checkpoint.pt"]
    assert torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)["step"] == 3
    model, tok = script.tiny_model_and_tokenizer()
    cfg.steps = 5  # a longer run continues the same one
    adapter = script.train(cfg, model=model, tokenizer=tok, tab=[], wiki=[])
    state = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)
    assert state["format"] == "tokendp.checkpoint/1" and state["step"] == 5 and state["tokens"] > 0
    config = json.loads((adapter / "adapter_config.json").read_text())
    tensors = load_file(str(adapter / "adapter_model.safetensors"))
    assert config["r"] == 4 and config["peft_type"] == "LORA" and config["base_model_name_or_path"] == "tiny"
    assert tensors and all(t.dtype == torch.float16 for t in tensors.values())
    assert all(k.startswith("base_model.model.model.layers.") for k in tensors)
    assert json.loads((adapter / "training.json").read_text())["step"] == 5
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2, 3, 4, 5]
    model, tok = script.tiny_model_and_tokenizer()
    cfg.r = 8  # another run: refused, never resumed from this one's checkpoint
    with pytest.raises(InvalidInputError, match="other data or settings"):
        script.train(cfg, model=model, tokenizer=tok, tab=[], wiki=[])


def test_a_typed_smoke_run_ships_its_style_and_sanitize_builds_typed_rows_for_it(tmp_path):
    """scripts/train_rewriter.py --smoke --placeholder-style typed, end to end: the adapter's and
    the merged model's tokendp.json declare the style; sanitize --model <dir> shows the labels."""
    from click.testing import CliRunner

    from tokendp.cli import main
    from tokendp.jobs.config import SanitizeConfig
    from tokendp.jobs.sanitize import prepare_sanitize
    from tokendp.text.spans import Span

    script = _script()
    adapter = script.smoke(str(tmp_path / "run"), steps=2, placeholder_style="typed")
    model = tmp_path / "run" / "model"
    for where in (adapter, model):
        options = json.loads((where / "tokendp.json").read_text())
        assert options["placeholder_style"] == "typed" and options["placeholders"]["PERSON"] == "<|PERSON|>"
    assert "typed slots" in json.loads((adapter / "training.json").read_text())["objective"]
    text = "Dear Dr Helen Marsh, born on 2 June 1961."
    spans = [Span(8, 19, "PERSON"), Span(29, 40, "DATETIME")]
    prepared = prepare_sanitize([text], spans=[spans], model=str(model),
                                config=SanitizeConfig(method="public", max_new_tokens=4))
    public = prepared.backend.tokenizer.decode(prepared.documents[0].context.rows[0])
    assert "Helen" not in public and "1961" not in public and "_" not in public
    assert "<|PERSON|>" in public and "<|DATETIME|>" in public
    (tmp_path / "letter.txt").write_text(text)
    (tmp_path / "spans.json").write_text(json.dumps([s.to_dict() for s in spans]))
    result = CliRunner().invoke(main, ["sanitize", str(tmp_path / "letter.txt"), "--spans", str(tmp_path / "spans.json"),
                                       "--model", str(model), "--epsilon", "8", "--seed", "1", "--max-new-tokens", "4"])
    assert result.exit_code == 0, result.output
    single = script.smoke(str(tmp_path / "single"), steps=1)
    assert "placeholder_style" not in json.loads((single / "tokendp.json").read_text())  # as the shipped adapter


def test_a_run_can_start_from_an_adapter_and_resumes_as_itself(tmp_path):
    """--init-adapter: the run starts from that adapter's tensors (so continuing the shipped
    rewriter with typed slots needs far fewer steps), its weights' hash joins the fingerprint,
    and a cut-off run resumes from its own checkpoint, not from the adapter again."""
    from peft import PeftModel
    from safetensors.torch import load_file

    script = _script()
    first = script.smoke(str(tmp_path / "first"), steps=2)
    start = {k: v.float() for k, v in load_file(str(first / "adapter_model.safetensors")).items()}
    model, tok = script.tiny_model_and_tokenizer()
    cfg = script.Config(out=str(tmp_path / "cont"), base_name="tiny-smoke", tab="", wikitext="", steps=0, batch=2,
                        warmup=1, r=4, alpha=8, max_tokens=64, checkpoint_every=1, log_every=1,
                        placeholder_style="typed", end_check=0, init_adapter=str(first), lr=1e-2)
    from tokendp.text.spans import Span

    text = ("The applicant, Mr Lindqvist, was born in 1961 and lives in Leeds. He was arrested on 2 May 2001 "
            "and held in the Leeds remand centre until 9 June 2001.")
    tab = [[(text, [Span(15, 27, "PERSON"), Span(41, 45, "DATETIME"), Span(59, 64, "LOC")])]]  # TAB paragraphs
    adapter = script.train(cfg, model=model, tokenizer=tok, tab=tab, wiki=[])  # step 0: the start as it is
    after = {k: v.float() for k, v in load_file(str(adapter / "adapter_model.safetensors")).items()}
    assert after.keys() == start.keys() and all(torch.equal(after[k], start[k]) for k in start)
    cfg.steps = 3
    model, tok = script.tiny_model_and_tokenizer()
    adapter = script.train(cfg, model=model, tokenizer=tok, tab=tab, wiki=[])  # resumes at step 0
    state = torch.load(tmp_path / "cont" / "checkpoint.pt", weights_only=False)
    assert state["step"] == 3 and json.loads((adapter / "training.json").read_text())["config"]["init_adapter"]
    trained = {k: v.float() for k, v in load_file(str(adapter / "adapter_model.safetensors")).items()}
    assert any(not torch.equal(trained[k], start[k]) for k in start)
    model, tok = script.tiny_model_and_tokenizer()
    cfg.r = 8  # an adapter of another rank cannot be the start
    with pytest.raises(SystemExit, match="r=4"):
        script.train(cfg, model=model, tokenizer=tok, tab=tab, wiki=[])
    base, _ = script.tiny_model_and_tokenizer()
    PeftModel.from_pretrained(base, str(adapter))  # loads as any adapter
