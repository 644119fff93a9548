"""The package's top level: plain job functions with full signatures, the first things users reach
for (tag, finetune, HFBackend, the accountants) importable from ``tokendp``, lazily (no torch)."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import tokendp


def _params(func, drop=()):
    return {name: (p.kind, p.default) for name, p in inspect.signature(func).parameters.items() if name not in drop}


def test_jobs_are_plain_functions_with_every_parameter_in_their_signature():
    import tokendp.jobs.sanitize as sanitize_module

    for name in ("sanitize", "sanitize_batch", "generate", "generate_batch", "synthesize", "predict", "finetune",
                 "tag"):
        func = getattr(tokendp, name)
        assert inspect.isfunction(func), name
        kinds = {p.kind for p in inspect.signature(func).parameters.values()}
        assert inspect.Parameter.VAR_KEYWORD not in kinds and inspect.Parameter.VAR_POSITIONAL not in kinds, name
    assert tokendp.sanitize is sanitize_module.sanitize and inspect.ismodule(sanitize_module)


def test_one_document_takes_exactly_what_a_batch_takes():
    from tokendp.jobs.synthesize import Synthesizer

    assert _params(tokendp.sanitize, {"text"}) == _params(tokendp.sanitize_batch, {"texts"})
    assert _params(tokendp.generate, {"prompt"}) == _params(tokendp.generate_batch, {"prompts"})
    synth = _params(tokendp.synthesize, {"references", "num", "seed", "on_token"})
    older = {"references_per_text": "batch_size", "max_new_tokens": "max_tokens"}  # the class keeps the old words
    assert {older.get(name, name): p for name, p in synth.items()} == _params(Synthesizer.__init__, {"self"})
    for func in (tokendp.sanitize, tokendp.generate, tokendp.synthesize, tokendp.predict, tokendp.finetune):
        assert {"model", "device"} <= set(_params(func))
    for func in (tokendp.sanitize, tokendp.generate, tokendp.synthesize, tokendp.predict):
        assert {"tokenizer", "dtype"} <= set(_params(func))
    assert "backend" in _params(tokendp.predict)


def test_renamed_keywords_maps_the_old_name_warns_and_refuses_both():
    from tokendp.jobs._renamed import renamed_keywords

    @renamed_keywords(base="model")
    def job(text, *, model="tiny"):
        return text, model

    assert list(inspect.signature(job).parameters) == ["text", "model"]
    assert job("x", model="m") == ("x", "m")
    with pytest.warns(FutureWarning, match=r"job\(base=...\) is deprecated, use model="):
        assert job("x", base="m") == ("x", "m")
    with pytest.raises(TypeError, match="got model= and its deprecated spelling base="):
        job("x", model="m", base="m")


def _bad_calls(tmp_path):
    """(job, old keyword, new keyword, a call with the old keyword that fails validation before any model loads)."""
    refs = ["a", "b"]
    return [
        ("synthesize", "batch_size", "references_per_text",
         lambda: tokendp.synthesize(refs, epsilon=1.0, delta=1e-5, batch_size=0, max_new_tokens=2)),
        ("synthesize", "max_tokens", "max_new_tokens",
         lambda: tokendp.synthesize(refs, epsilon=1.0, delta=1e-5, references_per_text=2, max_tokens=0)),
        ("predict", "base", "model",
         lambda: tokendp.predict("x", ensemble=tmp_path, queries=4, delta=2.0, beta=0.1, base="tiny")),
        ("finetune", "base", "model",
         lambda: tokendp.finetune(texts=["a"], out=tmp_path, base="tiny", config=tokendp.FinetuneConfig(lr=-1.0))),
    ]


@pytest.mark.parametrize("case", range(4))
def test_the_jobs_speak_the_cli_vocabulary_and_still_take_the_old_keywords(case, tmp_path):
    """One name per concept, as the command line's flags (README "One vocabulary"): the signature
    shows the new keyword; the old one still reaches the job, with a FutureWarning naming the new
    one (here the job then refuses a bad parameter, so no model runs)."""
    from tokendp.errors import InvalidParameterError

    job, old, new, call = _bad_calls(tmp_path)[case]
    params = inspect.signature(getattr(tokendp, job)).parameters
    assert new in params and old not in params
    with pytest.warns(FutureWarning, match=rf"{job}\({old}=...\) is deprecated, use {new}="):
        with pytest.raises(InvalidParameterError):
            call()


def test_the_top_level_is_lazy_and_exports_the_accountants():
    code = ("import sys, tokendp\n"
            "eps = tokendp.dp_fusion_epsilon(alpha=2.0, beta=0.1, groups=1, max_tokens=10, delta=1e-5)\n"
            "assert eps > 0 and tokendp.Ledger and tokendp.pmixed_epsilon and tokendp.dp_sgd_epsilon\n"
            "sys.exit(1 if 'torch' in sys.modules else 0)\n")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0
    from tokendp import accounting

    for name in ("dp_fusion_epsilon", "dp_fusion_beta", "invisibleink_epsilon", "invisibleink_clip", "amin_epsilon",
                 "pmixed_epsilon", "pmixed_beta", "dp_sgd_pld_epsilon", "dp_sgd_epsilon", "calibrate_noise_multiplier",
                 "dp_decoding_epsilon", "dp_prompt_epsilon", "Ledger"):
        assert getattr(tokendp, name) is getattr(accounting, name) and name in dir(tokendp)
    assert set(tokendp.__all__) <= set(dir(tokendp))


def test_the_top_level_dp_sgd_accountant_is_the_one_finetune_reports_with():
    """An Opacus user reaching for DP-SGD's epsilon at the top level finds the default accountant
    (PLD: 1.515 where the RDP bound says 1.725), without importing torch."""
    pytest.importorskip("dp_accounting")
    from tokendp import accounting

    code = ("import sys, tokendp\n"
            "eps = tokendp.dp_sgd_pld_epsilon(sampling_rate=0.01, noise_multipliers=[1.1] * 1000, delta=1e-5)\n"
            "print(eps)\n"
            "sys.exit(1 if 'torch' in sys.modules else 0)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    default = accounting.dp_sgd_schedule_epsilon(sampling_rate=0.01, noise_multipliers=[1.1] * 1000, delta=1e-5)
    assert accounting.DEFAULT_ACCOUNTANT == "pld" and float(run.stdout) == default
    assert round(default, 3) == 1.515 and round(tokendp.dp_sgd_epsilon(
        sampling_rate=0.01, noise_multipliers=[1.1] * 1000, delta=1e-5), 3) == 1.725


def test_tag_finetune_and_the_backend_class_from_the_top_level():
    from tokendp.backends import HFBackend
    from tokendp.jobs.finetune import FinetuneConfig, finetune

    assert tokendp.finetune is finetune and tokendp.FinetuneConfig is FinetuneConfig
    assert tokendp.HFBackend is HFBackend
    text = "Call me on 2 June 2024."
    spans = tokendp.tag(text, tagger="patterns")
    assert spans and all(isinstance(s, tokendp.Span) for s in spans)
    assert any(text[s.start:s.end] == "2 June 2024" and s.label == "DATE" for s in spans)


def test_tag_refuses_what_it_cannot_read():
    from tokendp.errors import InvalidInputError, InvalidParameterError

    with pytest.raises(InvalidInputError, match="one text"):
        tokendp.tag(["a text"])
    with pytest.raises(InvalidParameterError, match="unknown tagger"):
        tokendp.tag("a text", tagger="nope")
    with pytest.raises(InvalidParameterError, match="object with tag"):
        tokendp.tag("a text", tagger=5)
