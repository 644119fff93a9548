"""Issue 45 item 3: ``tokendp generate`` on its default model (smollm2) answers a question about a
held-out letter without copying the placeholders its rows show where a span was.

Before runs of the placeholder were suppressed (docs/privacy.md, "Common ground"), seed 0 answered
"What was the patient referred with?" with 'Document 1:\\nDear________________ (_____________) in
the outpatient clinic of______', and three of the eight held-out questions came back with runs.
No token that could write a run is ever released, so this holds for every seed and every model
whose placeholder is "_"; two questions keep the test short.
"""

from __future__ import annotations

import re

import pytest
import torch
from repo_scripts import load_script

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    from tokendp.backends import load_backend

    torch.set_num_threads(1)
    return load_backend("smollm2")


@pytest.mark.parametrize("question", ["What was the patient referred with?", "What did the echocardiogram show?"])
def test_an_answer_holds_no_run_of_placeholders(smollm2, question):
    from tokendp import generate

    (letter,) = [d for d in load_script("benchmarks/held_out.py").documents() if d.doc_id == "cardiology-letter"]
    out = generate(question, context=letter.text, spans=list(letter.spans), model=smollm2, epsilon=8.0,
                   max_new_tokens=32, seed=0)
    assert out.text.strip() and not re.search("_{3,}", out.text), out.text
