"""Model objects in the jobs: a transformers causal LM or a peft PeftModel with its tokenizer, on
any dtype, end to end through tokendp.sanitize / generate / synthesize / predict; tokendp.json
found beside the weights, the fallback reported once, and no model repr in any error."""

from __future__ import annotations

import copy
import logging
import warnings

import pytest
import torch

import tinylm
import tokendp
from tokendp.accounting import dp_fusion_epsilon
from tokendp.backends import HFBackend, Row, RowSequence, load_backend
from tokendp.errors import InvalidParameterError
from tokendp.text.spans import Span

LETTER = "Dear Dr Helen Marsh, I am writing about my patient Mr Tomas Lindqvist, who lives in Leeds."
SPANS = [Span(8, 19, "PERSON"), Span(51, 66, "PERSON"), Span(83, 88, "LOC")]
MASKED = {"template": "<|doc|>{document}<|rewrite|>", "placeholder": "<|mask|>"}


@pytest.fixture()
def lm():
    """A fresh copy of the tiny model (the jobs use an object in place)."""
    return copy.deepcopy(tinylm.model())


def _peft(lm):
    from peft import get_peft_model

    torch.manual_seed(7)
    with warnings.catch_warnings():  # peft calls transformers' deprecated is_gradient_checkpointing
        warnings.simplefilter("ignore", FutureWarning)
        pm = get_peft_model(lm, tinylm.lora_config())
    with torch.no_grad():  # a fresh LoRA's B is 0 (the base model): make the adapter matter
        for name, p in pm.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05)
    return pm


def test_sanitize_takes_a_transformers_model_and_its_tokenizer(lm):
    res = tokendp.sanitize(LETTER, spans=SPANS, model=lm, tokenizer=tinylm.tokenizer(), beta=0.1,
                           max_new_tokens=4, seed=0, **MASKED)
    rep = res.report
    assert rep.model == "Qwen2ForCausalLM" and rep.max_new_tokens == 4 and 1 <= rep.tokens_generated <= 4
    for g in rep.groups:
        assert g.epsilon == dp_fusion_epsilon(alpha=rep.alpha, beta=0.1, groups=2, max_tokens=4, delta=1e-5)
    # the same model wrapped by hand gives the same rewrite: the object path adds nothing
    by_hand = tokendp.sanitize(LETTER, spans=SPANS, model=HFBackend(lm, tinylm.tokenizer()), beta=0.1,
                               max_new_tokens=4, seed=0, **MASKED)
    assert by_hand.text == res.text


def test_a_peft_model_runs_with_its_active_adapter_end_to_end(lm):
    pm = _peft(lm)
    backend = load_backend(pm, tokenizer=tinylm.tokenizer())
    assert backend.adapters == ("default",) and backend.as_given
    ids = tinylm.tokenizer()(LETTER)["input_ids"]
    _, logits = backend.prefill([RowSequence((Row(tuple(ids)),))])  # (1, V)
    with torch.no_grad():
        own = pm(input_ids=torch.tensor([ids])).logits[0, -1]  # (V,)
        with pm.disable_adapter():
            base = pm(input_ids=torch.tensor([ids])).logits[0, -1]
    assert torch.allclose(logits[0], own, atol=1e-4) and not torch.allclose(logits[0], base, atol=1e-3)
    res = tokendp.sanitize(LETTER, spans=SPANS, model=pm, tokenizer=tinylm.tokenizer(), epsilon=8,
                           max_new_tokens=3, seed=1, **MASKED)
    assert res.report.model == "Qwen2ForCausalLM" and all(g.epsilon <= 8 for g in res.report.groups)
    with pytest.raises(Exception, match="runs the model as given"):  # no silent base rows in a mixed batch
        backend.prefill([RowSequence((Row(tuple(ids)), Row(tuple(ids), "default")))])


def test_any_dtype_and_an_explicit_device_cast(lm):
    half = copy.deepcopy(lm).to(torch.bfloat16)
    res = tokendp.sanitize(LETTER, spans=SPANS, model=half, tokenizer=tinylm.tokenizer(), beta=0.1,
                           max_new_tokens=3, seed=0, **MASKED)
    assert res.report.tokens_generated >= 1 and next(half.parameters()).dtype == torch.bfloat16
    backend = load_backend(lm, tokenizer=tinylm.tokenizer(), device="cpu", dtype="bfloat16")
    assert next(backend.model.parameters()).dtype == torch.bfloat16


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_model_on_the_gpu_runs_where_it_is(lm):
    gpu = lm.to("cuda", torch.bfloat16)
    backend = load_backend(gpu, tokenizer=tinylm.tokenizer())
    assert backend.device.type == "cuda"
    res = tokendp.sanitize(LETTER, spans=SPANS, model=gpu, tokenizer=tinylm.tokenizer(), beta=0.1,
                           max_new_tokens=3, seed=0, **MASKED)
    assert res.report.tokens_generated >= 1 and next(gpu.parameters()).device.type == "cuda"


def test_generate_synthesize_and_predict_take_model_objects(lm):
    tok = tinylm.tokenizer()
    ans = tokendp.generate("Where does he live?", context=LETTER, spans=SPANS, model=lm, tokenizer=tok, beta=0.1,
                           max_new_tokens=3, seed=0, **MASKED)
    assert ans.report.model == "Qwen2ForCausalLM" and ans.report.tokens_generated >= 1
    texts = tokendp.synthesize(tinylm.CORPUS[:2], epsilon=1.0, delta=1e-5, references_per_text=2, max_new_tokens=2,
                               model=lm, tokenizer=tok, domain="a letter", seed=0)
    assert len(texts) == 1 and texts[0].model == "Qwen2ForCausalLM"
    ens = tinylm.ensemble_dir(2)
    kwargs = dict(ensemble=ens, queries=4, beta=0.5, delta=1e-5, seed=3)
    from_manifest = tokendp.predict("The court held", **kwargs)  # the manifest's base: the same weights, saved
    from_object = tokendp.predict("The court held", model=lm, tokenizer=tok, **kwargs)
    assert from_object.answers == from_manifest.answers


def test_tokendp_json_beside_the_weights_is_found():
    """The embedded model loaded by hand rewrites exactly as ``model="tiny"``: its prompt template,
    placeholder and stop strings come from the tokendp.json beside its weights (without them it
    read a plain template it was never trained on and wrote junk)."""
    from transformers import AutoModelForCausalLM

    from tokendp.models import DEFAULT_MODEL_DIR, prompt_format

    obj = AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL_DIR)
    backend = load_backend(obj)  # the tokenizer saved beside the weights
    assert backend.options == prompt_format()
    kwargs = dict(spans=[Span(8, 19, "PERSON")], epsilon=8, max_new_tokens=12, seed=0)
    assert tokendp.sanitize(LETTER, model=obj, **kwargs).text == tokendp.sanitize(LETTER, model="tiny", **kwargs).text


def test_the_fallback_is_reported_once_per_model_without_private_text(lm, caplog):
    with caplog.at_level(logging.WARNING, logger="tokendp"):
        for _ in range(2):
            tokendp.sanitize(LETTER, spans=SPANS, model=lm, tokenizer=tinylm.tokenizer(), beta=0.1,
                             max_new_tokens=2, seed=0)
    lines = [r.getMessage() for r in caplog.records if r.name == "tokendp"]
    assert len(lines) == 1
    assert "has no tokendp.json" in lines[0] and "plain templates" in lines[0] and "'_'" in lines[0]
    assert not any(LETTER[s.start:s.end] in lines[0] for s in SPANS)
    chat = copy.deepcopy(lm)
    with caplog.at_level(logging.WARNING, logger="tokendp"):
        load_backend(chat, tokenizer=tinylm.tokenizer(chat=True))
    assert "the tokenizer's chat template" in caplog.records[-1].getMessage()


def test_bad_models_and_tokenizers_are_named_by_type_never_by_repr(lm):
    for bad in (object(), torch.nn.Linear(3, 3), lm.model):  # not a model; no config; no LM head
        with pytest.raises(InvalidParameterError) as err:
            tokendp.sanitize(LETTER, spans=SPANS, model=bad, beta=0.1)
        assert type(bad).__name__ in str(err.value) and "\n" not in str(err.value) and len(str(err.value)) < 300
    with pytest.raises(InvalidParameterError, match="pass tokenizer=") as err:
        tokendp.sanitize(LETTER, spans=SPANS, model=lm, beta=0.1)
    assert "Linear(" not in str(err.value) and "(model)" not in str(err.value)
    with pytest.raises(InvalidParameterError, match="transformers tokenizer"):
        tokendp.sanitize(LETTER, spans=SPANS, model=lm, tokenizer="gpt2", beta=0.1)
    with pytest.raises(InvalidParameterError, match="goes with a model object"):
        tokendp.sanitize(LETTER, spans=SPANS, model="tiny", tokenizer=tinylm.tokenizer(), beta=0.1)


def test_a_directory_without_tokendp_json_is_reported_once(caplog):
    from tokendp.backends import hf

    hf._load_cached.cache_clear()  # the shared tiny directories may be loaded (and reported) already
    bare, described = tinylm.model_dir(), tinylm.model_dir(options='{"placeholder": "<|mask|>"}')
    with caplog.at_level(logging.WARNING, logger="tokendp"):
        for _ in range(2):
            load_backend(str(bare))  # loaded once (cached), reported once
        load_backend(str(described))
    lines = [r.getMessage() for r in caplog.records if r.name == "tokendp"]
    assert len(lines) == 1 and "has no tokendp.json" in lines[0] and str(bare) in lines[0]
