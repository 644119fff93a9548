"""The package's top level: plain job functions with full signatures, the first things users reach
for (tag, finetune, HFBackend, the accountants) importable from ``tokendp``, lazily (no torch)."""

from __future__ import annotations

import inspect
import subprocess
import sys

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
    assert synth == _params(Synthesizer.__init__, {"self"})
    for func in (tokendp.sanitize, tokendp.generate, tokendp.synthesize):
        assert {"model", "tokenizer", "device", "dtype"} <= set(_params(func))
    assert {"base", "tokenizer", "backend"} <= set(_params(tokendp.predict))


def test_the_top_level_is_lazy_and_exports_the_accountants():
    code = ("import sys, tokendp\n"
            "eps = tokendp.dp_fusion_epsilon(alpha=2.0, beta=0.1, groups=1, max_tokens=10, delta=1e-5)\n"
            "assert eps > 0 and tokendp.Ledger and tokendp.pmixed_epsilon and tokendp.dp_sgd_epsilon\n"
            "sys.exit(1 if 'torch' in sys.modules else 0)\n")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0
    from tokendp import accounting

    for name in ("dp_fusion_epsilon", "dp_fusion_beta", "invisibleink_epsilon", "invisibleink_clip", "amin_epsilon",
                 "pmixed_epsilon", "pmixed_beta", "dp_sgd_epsilon", "calibrate_noise_multiplier",
                 "dp_decoding_epsilon", "dp_prompt_epsilon", "Ledger"):
        assert getattr(tokendp, name) is getattr(accounting, name) and name in dir(tokendp)
    assert set(tokendp.__all__) <= set(dir(tokendp))


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
    import pytest

    from tokendp.errors import InvalidInputError, InvalidParameterError

    with pytest.raises(InvalidInputError, match="one text"):
        tokendp.tag(["a text"])
    with pytest.raises(InvalidParameterError, match="unknown tagger"):
        tokendp.tag("a text", tagger="nope")
    with pytest.raises(InvalidParameterError, match="object with tag"):
        tokendp.tag("a text", tagger=5)
