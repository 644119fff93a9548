"""The prompt pair of DP synthetic text: a public prompt and a template for the private rows.

InvisibleInk (Vinod, Pillutla, Thakurta, NeurIPS 2025) and Amin et al. (2024) prompt the model
twice per synthetic text: each private row shows the instruction *and one reference*; the public
row shows the same request *without any reference*. The public row's logits are what every
reference's clipped difference is measured from (InvisibleInk's DClip and Top-k+), and what is
sampled at epsilon 0, so it must ask for the same kind of text, and it must not depend on any
reference: here it is a function of the domain description, the tokenizer and the template only.

For an instruction model (a tokenizer with a chat template), one user turn each:

* private: ``Here is an example of {domain}:`` / the reference / ``Write another example of
  {domain}: ...``
* public: ``Write an example of {domain}. ...``

``domain`` is a noun phrase with its article, e.g. ``"a paragraph from a judgment of the European
Court of Human Rights"``. It is required: at the clips differential privacy allows, the public
row decides the topic more than the references do (with "a text" instead, SmolLM2's texts at
epsilon 10 were all off topic for ECHR references; docs/synthesize.md), and nothing derived from
the references may stand in for it. A model without a chat template gets the same pair as plain
text. An explicit template (``--prompt``, or a model directory's
``tokendp.json``) keeps the older form: the public row is that template around a public
document (the model's placeholder, or nothing), so ``{document}`` marks where a reference goes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tokendp.errors import InvalidParameterError
from tokendp.text.contexts import PromptTemplate, prompt_template

PRIVATE_CHAT = ("Here is an example of {domain}:\n\n{document}\n\nWrite another example of {domain}: a new text "
                "of the same kind, style and topic. Do not copy the example. Reply with the new text only.")
PUBLIC_CHAT = "Write an example of {domain}. Reply with the text only.{document}"
PRIVATE_PLAIN = "Here is an example of {domain}:\n\n{document}\n\nAnother example of {domain}:\n"
PUBLIC_PLAIN = "An example of {domain}:\n{document}"
TEMPLATE_INSTRUCTION = ("Write a new text of the same kind, style and topic as the following example. "
                        "Do not copy it.")  # what a template's {instruction} reads


@dataclass(frozen=True)
class PromptPair:
    """Token ids of the public row, and the template around each reference (the private rows)."""

    public: tuple[int, ...]
    private: PromptTemplate

    @property
    def public_prefix(self) -> int:
        """Leading tokens the public row shares with every private row: the common start of
        the public prompt and the private template before the reference (public data only)."""
        n = 0
        for a, b in zip(self.public, self.private.before):
            if a != b:
                break
            n += 1
        return n


def _ids(tokenizer: Any, text: str) -> tuple[int, ...]:
    return tuple(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else ()


def _check_domain(domain: str | None) -> str:
    if domain is None:
        raise InvalidParameterError(
            "say what kind of text the references are with domain (--domain), e.g. 'a hospital discharge note': the "
            "public prompt asks for that kind of text and, at the clips differential privacy allows, sets the topic; "
            "the references cannot (docs/synthesize.md)")
    if not isinstance(domain, str) or not domain.strip():
        raise InvalidParameterError(f"domain must be a non-empty description such as 'a hospital discharge note', "
                                    f"got {domain!r}")
    if "{" in domain or "}" in domain:
        raise InvalidParameterError("domain describes the kind of text in words, without braces; "
                                    "'{document}' belongs in a prompt template")
    return domain.strip()


def synthesis_prompts(tokenizer: Any, *, options: Mapping[str, Any] | None = None, domain: str | None = None,
                      template: str | None = None, public_document: str | None = None) -> PromptPair:
    """The prompt pair for a model (module docstring).

    Precedence: an explicit ``template`` (a string with ``{document}``, and optionally
    ``{instruction}``, which reads :data:`TEMPLATE_INSTRUCTION`), then the model's
    ``tokendp.json`` ``"prompt_template"``: the public row is the template around
    ``public_document`` (default: the model's ``"placeholder"``, else nothing). Otherwise the
    instruction pair for ``domain`` (required there), in the chat template when the tokenizer has one, else as
    plain text (with a BOS token when the tokenizer adds one). ``public_document`` goes with a
    template only: in the pair the public row is the request alone.
    """
    options = options or {}
    if template is not None or "prompt_template" in options:
        if domain is not None and template is not None:
            raise InvalidParameterError("domain fills the default instruction pair; with a prompt template write "
                                        "the description into the template instead")
        if domain is not None:
            raise InvalidParameterError("this model reads its own fixed template (tokendp.json), which has no place "
                                        "for a domain; drop domain, or use an instruction model such as smollm2")
        private = prompt_template(tokenizer, options=options, template=template, instruction=TEMPLATE_INSTRUCTION)
        public = public_document if public_document is not None else str(options.get("placeholder", ""))
        return PromptPair(private.wrap(_ids(tokenizer, public)), private)
    if public_document is not None:
        raise InvalidParameterError("public_document goes with a prompt template; the instruction pair's public "
                                    "row is the request without any document")
    domain = _check_domain(domain)
    if getattr(tokenizer, "chat_template", None):
        private = prompt_template(tokenizer, instruction=PRIVATE_CHAT.replace("{domain}", domain))
        public = prompt_template(tokenizer, instruction=PUBLIC_CHAT.replace("{domain}", domain))
    else:
        private = prompt_template(tokenizer, template=PRIVATE_PLAIN.replace("{domain}", domain))
        public = prompt_template(tokenizer, template=PUBLIC_PLAIN.replace("{domain}", domain))
    return PromptPair(public.wrap(()), private)
