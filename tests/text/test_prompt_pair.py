"""The synthesis prompt pair: private rows show one reference, the public row none."""

from __future__ import annotations

import pytest

import tinylm
from tokendp.errors import InvalidParameterError
from tokendp.text.prompt_pair import TEMPLATE_INSTRUCTION, synthesis_prompts

DOMAIN = "a clinic letter"
REFERENCE = "Mr Jonas Berg was seen on 3 May."


def _decode(tok, ids):
    return tok.decode(list(ids))


def test_chat_pair_shows_the_reference_only_in_the_private_rows():
    tok = tinylm.tokenizer(chat=True)
    pair = synthesis_prompts(tok, domain=DOMAIN)
    private = _decode(tok, pair.private.wrap(tok(REFERENCE, add_special_tokens=False)["input_ids"]))
    public = _decode(tok, pair.public)
    assert private.startswith(f"<|doc|>user: Here is an example of {DOMAIN}:\n\n{REFERENCE}\n\nWrite another example of {DOMAIN}")
    assert private.endswith("\n<|rewrite|>")
    assert public == f"<|doc|>user: Write an example of {DOMAIN}. Reply with the text only.\n<|rewrite|>"
    assert REFERENCE not in public and "example:" not in public


def test_plain_pair_and_bos():
    tok = tinylm.tokenizer(add_bos=True)
    pair = synthesis_prompts(tok, domain=DOMAIN)
    assert pair.public[0] == tok.bos_token_id and pair.private.before[0] == tok.bos_token_id
    assert _decode(tok, pair.public[1:]) == f"An example of {DOMAIN}:\n"
    private = _decode(tok, pair.private.wrap(tok(REFERENCE, add_special_tokens=False)["input_ids"])[1:])
    assert private == f"Here is an example of {DOMAIN}:\n\n{REFERENCE}\n\nAnother example of {DOMAIN}:\n"


def test_the_pair_needs_a_domain():
    for tok in (tinylm.tokenizer(chat=True), tinylm.tokenizer()):
        with pytest.raises(InvalidParameterError, match="what kind of text the references are"):
            synthesis_prompts(tok)


def test_templates_keep_the_public_document_form():
    tok = tinylm.tokenizer()
    options = {"prompt_template": "<|doc|>{document}<|rewrite|>", "placeholder": "<|mask|>"}
    pair = synthesis_prompts(tok, options=options)
    assert _decode(tok, pair.public) == "<|doc|><|mask|><|rewrite|>"
    given = synthesis_prompts(tok, template="{instruction}\n{document}\nAnother:", public_document="(none)")
    assert _decode(tok, given.public) == f"{TEMPLATE_INSTRUCTION}\n(none)\nAnother:"


@pytest.mark.parametrize("kwargs, message", [
    (dict(domain=" "), "non-empty"),
    (dict(domain="a {document}"), "without braces"),
    (dict(domain="a note", template="{document}"), "with a prompt template"),
    (dict(public_document="x"), "goes with a prompt template"),
])
def test_bad_arguments_are_refused_with_a_message(kwargs, message):
    with pytest.raises(InvalidParameterError, match=message):
        synthesis_prompts(tinylm.tokenizer(chat=True), **kwargs)
    with pytest.raises(InvalidParameterError, match="fixed template"):
        synthesis_prompts(tinylm.tokenizer(), options={"prompt_template": "{document}"}, domain="a note")
