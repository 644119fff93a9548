"""The rewriter's training targets respect the public structure of their document: dates in an
order that fits their roles, titles that agree with pronouns, address parts that agree, and
distinct entities with distinct fillers."""

from __future__ import annotations

import random
import re
from datetime import date, datetime

import pytest

pytest.importorskip("faker")

from tokendp.models.training.coherent import COUNTRY_OF, CoherentFillers, format_like  # noqa: E402
from tokendp.models.training.synthetic import SyntheticDocs  # noqa: E402
from tokendp.text.spans import Span  # noqa: E402

SYNTH = SyntheticDocs(5)


def _spans(text: str, marked: list[tuple[str, str]]) -> list[Span]:
    out, pos = [], 0
    for piece, label in marked:
        start = text.index(piece, pos)
        out.append(Span(start, start + len(piece), label))
        pos = start + len(piece)
    return out


def _fill(text, spans, seed, **kw):
    f = CoherentFillers(SYNTH, random.Random(seed), text, spans, **kw)
    return f, [f(i) for i in range(len(spans))]


LETTER = ("The patient was admitted on 3 May 2001 and discharged on 05/06/2001. He was born on "
          "12 March 1961. He was readmitted on 2 February 2003.")
DATES = _spans(LETTER, [("3 May 2001", "DATETIME"), ("05/06/2001", "DATETIME"), ("12 March 1961", "DATETIME"),
                        ("2 February 2003", "DATETIME")])


@pytest.mark.parametrize("seed", range(25))
def test_births_come_decades_before_events_and_events_keep_document_order(seed):
    f, (admitted, discharged, born, readmitted) = _fill(LETTER, DATES, seed)
    assert [f.role(i) for i in range(4)] == ["event", "event", "birth", "event"]  # from the words before each
    a, d = datetime.strptime(admitted, "%d %B %Y"), datetime.strptime(discharged, "%d/%m/%Y")
    b, r = datetime.strptime(born, "%d %B %Y"), datetime.strptime(readmitted, "%d %B %Y")
    assert re.fullmatch(r"\d\d/\d\d/\d{4}", discharged)  # the original's format
    assert (a - b).days >= 365 * 17 and a <= d <= r  # a birth before any event; events in document order
    assert {admitted, discharged, readmitted} != {"3 May 2001", "05/06/2001", "2 February 2003"}


def test_dates_keep_their_format():
    when = date(1987, 4, 8)
    assert format_like("17 Apr. 2025", when) == "8 Apr. 1987"
    assert format_like("May 1999", when) == "April 1987"
    assert format_like("2019-11-02", when) == "1987-04-08"
    assert format_like("the 1990s", when) == "the 1980s"
    assert format_like("1st December 2001", when) == "8th April 1987"


@pytest.mark.parametrize("seed", range(20))
def test_titles_and_first_names_agree_with_the_pronouns_around_them(seed):
    text = ("Mr Tomas Lindqvist wrote to the clinic. She asked for her results. "
            "Ms Anna Kovacs replied; he thanked his colleague. Dr Amir Patel signed.")
    spans = _spans(text, [("Mr Tomas Lindqvist", "PERSON"), ("Ms Anna Kovacs", "PERSON"), ("Dr Amir Patel", "PERSON")])
    f, (first, second, doctor) = _fill(text, spans, seed)
    assert [f.gender(0), f.gender(1)] == ["f", "m"]  # the pronouns win over the hidden title
    assert first.split()[0] in ("Ms", "Mrs") and second.split()[0] == "Mr" and doctor.startswith("Dr ")
    females = getattr(f.fake, "first_names_female", None)
    if females:
        assert first.split()[1] in females
    outside = _spans("Dear Mrs Kovacs, he said", [("Kovacs", "PERSON")])
    g, _ = _fill("Dear Mrs Kovacs, he said", outside, seed)
    assert g.gender(0) == "f"  # a public title just before the slot decides


POSTCODES = {"de_DE": r"\d{5}", "pl_PL": r"\d{2}-\d{3}", "pt_PT": r"\d{4}-\d{3}", "cs_CZ": r"\d{3} \d{2}",
             "nl_NL": r"\d{4} ?[A-Z]{2}", "hu_HU": r"H-\d{4}"}


@pytest.mark.parametrize("locale", sorted(POSTCODES))
def test_the_parts_of_an_address_agree(locale):
    text = ("She lives at 12 Main Street, 1234 Budapest, Hungary, and works in Budapest and Szeged. "
            "The case against Turkey was heard in Strasbourg.")
    spans = _spans(text, [("12 Main Street", "LOC"), ("1234", "LOC"), ("Budapest", "LOC"), ("Hungary", "LOC"),
                          ("Budapest", "LOC"), ("Szeged", "LOC"), ("Turkey", "LOC"), ("Strasbourg", "LOC")])
    for seed in range(5):
        f, (street, postcode, city, country, city_again, other, second_country, far) = _fill(
            text, spans, seed, locale=locale)
        assert re.fullmatch(POSTCODES[locale], postcode), postcode
        assert country == COUNTRY_OF[locale].removeprefix("the ")  # the address's country is the locale's
        assert city == city_again and len({city, other, far}) == 3  # one city per name, distinct names apart
        assert second_country != country and street != "12 Main Street"


def test_a_full_address_shares_its_city_with_later_mentions():
    text = "Her address is 4 Rue Haute, 75001 Paris. She moved from Paris in 2001."
    spans = _spans(text, [("4 Rue Haute, 75001 Paris", "LOC"), ("Paris", "LOC")])
    for seed in range(5):
        _, (address, city) = _fill(text, spans, seed, locale="fr_FR")
        assert address.endswith(" " + city) and re.search(r"\b\d{5}\b", address)


@pytest.mark.parametrize("seed", range(10))
def test_distinct_entities_get_distinct_fillers_and_mentions_of_one_share_theirs(seed):
    names = ["Helen Marsh", "Tomas Lindqvist", "Amir Patel", "Anna Kovacs", "Piotr Nowak"]
    text = "; ".join(names) + "; Mr Marsh; Helen Marsh; the Regional Court; the Supreme Court."
    spans = _spans(text, [(n, "PERSON") for n in names] + [("Mr Marsh", "PERSON"), ("Helen Marsh", "PERSON"),
                                                           ("Regional Court", "ORG"), ("Supreme Court", "ORG")])
    _, out = _fill(text, spans, seed)
    people = out[:5]
    assert len(set(people)) == 5 and not set(people) & set(names)  # no single filler for every PERSON slot
    assert out[6] == out[0] and out[5].split()[-1] == out[0].split()[-1]  # the same person, the same name
    assert out[7] != out[8] and "Court" in out[7]


def test_training_examples_show_typed_slots_and_their_source_is_the_engines_public_row():
    from tokendp.models.training.rewriter import RewriterStream, tiny_model_and_tokenizer
    from tokendp.text.contexts import PromptTemplate, build_contexts, placeholders

    _, tok = tiny_model_and_tokenizer()
    text = "The applicant, Mr Lindqvist, was born in 1961 and lives in Leeds."
    spans = _spans(text, [("Mr Lindqvist", "PERSON"), ("1961", "DATETIME"), ("Leeds", "LOC")])
    options = {"placeholder_style": "typed"}
    stream = RewriterStream(tok, tab=[(text, spans)], wiki=["A sentence about Paris and Berlin in 1990. " * 8],
                            seed=2, options=options)
    e = stream.example("tab_fill")
    prompt = tok.decode(e.ids[:e.n_prompt])
    assert "<|PERSON|>" in prompt and "<|DATETIME|>" in prompt and "<|LOC|>" in prompt and "_" not in prompt
    public = build_contexts(text, spans, tok, template=PromptTemplate((), ()),
                            placeholder=placeholders(tok, options=options)).rows[0]
    assert list(stream.template.wrap(public)) == e.ids[:e.n_prompt]  # exactly what sanitize shows
    assert "Lindqvist" not in tok.decode(e.ids[e.n_prompt:])
    wiki = stream.example("wikifill")
    source = tok.decode(wiki.ids[:wiki.n_prompt])
    assert "<|MISC|>" not in source  # each pseudo-entity shows the kind its filler has
    single = RewriterStream(tok, tab=[(text, spans)], wiki=[], seed=2).example("tab_fill")
    assert "_" in tok.decode(single.ids[:single.n_prompt])  # the default: the shipped adapter's style
