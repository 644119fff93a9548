"""Benchmark: the tagger on held-out English clinical and legal letters naming people in many scripts.

Generates (deterministically, from ``--seed``) clinic letters, referrals, witness statements and
discharge summaries in English that name people in Arabic, Hebrew, Devanagari, CJK (Chinese,
Japanese, Korean), Cyrillic, Greek and extended-Latin script, with European street addresses
(Polish "ul.", German "Straße", French "rue", Italian "Via", Scandinavian "gate" / "gatan" /
"vej") and postcodes, hospitals, dates and record numbers, and scores a tagger on them: PERSON
character recall per script group, and recall and precision over every span.

Sources: the names are the "heldout" part of Faker's per-locale lists
(``tokendp.text.taggers.name_lists``): no word of them is in the shipped gazetteer or in the
CRF's training notes. Towns, postcodes and street names come from Faker's address providers;
the letters' wording is written here and differs from the training notes'. Needs Faker
(``pip install "tokendp[eval]"``).

    PYTHONPATH=src python benchmarks/multilingual_tagger.py [--documents 120] [--seed 0] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from dataclasses import dataclass, field

from faker import Faker
from faker.providers.address.it_IT import Provider as ItalianAddresses

from tokendp.eval.tagging import char_scores
from tokendp.text.spans import Span
from tokendp.text.taggers import get_tagger
from tokendp.text.taggers.name_lists import SCRIPT_GROUPS, person

TITLES = ("Mr", "Mrs", "Ms", "Dr", "Dr", "Professor")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")
SPECIALTIES = ("cardiology", "respiratory", "diabetes", "memory", "fracture", "renal", "neurology")
RELATIONS = ("her husband", "his wife", "their daughter", "her son", "a family friend", "his brother")

# Slots: {P} a person named in full or in part, {T} a titled person, {A} an address, {O} an
# organisation, {D} a date, {N} a record number, {F} a telephone number; {R} a relation, {S} a
# specialty (not private).
LETTERS: dict[str, str] = {
    "clinic letter": (
        "{O}\n{A}\n\n{D}\n\nDear {T},\n\nRe: {P}, date of birth {D}, hospital number {N}\n\n"
        "I reviewed {P} in the {S} clinic today. {P} came with {R}, {P}, who interpreted. "
        "Since the last visit on {D} the breathlessness has eased. {P} remains under the care of "
        "{T} at {O} for the kidney disease.\n\nI have asked {T} to repeat the echocardiogram. "
        "Should you wish to discuss this, my secretary, {P}, can be reached on {F}.\n\n"
        "Yours sincerely,\n\n{T}\nConsultant in {S}"),
    "referral": (
        "REFERRAL TO {O}\n\nFrom: {T}, {A}\nPatient: {P}\nAddress: {A}\nTelephone: {F}\n"
        "NHS number: {N}\n\nReason for referral: {P} has had three falls since {D}. "
        "Previously under the care of {T}. Lives with {R}, {P}, who is the main carer. "
        "The patient's sister {P} has power of attorney.\n\nMany thanks,\n{T}"),
    "witness statement": (
        "WITNESS STATEMENT\n\nName: {P}\nAddress: {A}\nOccupation: nurse\n\n"
        "1. On {D} I was on duty at {O} when {P} was brought in by {P}.\n"
        "2. I saw {T} speak with {P} in the corridor. {P} was shouting.\n"
        "3. I have known {P} since {D}; we worked together at {O}.\n"
        "4. Later that evening {P} telephoned me from {F} and asked me to say nothing.\n\n"
        "I believe that the facts stated in this witness statement are true.\n\n"
        "Signed: {P}\nDated: {D}"),
    "discharge summary": (
        "DISCHARGE SUMMARY\n{O}\n\nPatient: {P}    Hospital no: {N}\nAdmitted: {D}    "
        "Discharged: {D}\nConsultant: {T}\nGP: {T}, {A}\n\nSummary: {P} was admitted with "
        "pneumonia and treated with antibiotics. The family ({P} and {P}) were updated daily. "
        "Follow-up with {T} in the {S} clinic in six weeks.\n\nNext of kin: {P}, {A}, tel. {F}"),
}
# Faker's it_IT towns come in an order (and city() draws) that vary with the hash seed: sorted here.
ITALIAN_TOWNS = tuple(sorted(ItalianAddresses.cities))
_SLOT = re.compile(r"\{([PTAODNFRS])\}")
_LABELS = {"A": "LOC", "O": "ORG", "D": "DATETIME", "N": "CODE", "F": "CODE"}


@dataclass
class Letter:
    """One generated document: its text, gold spans (TAB labels; a title belongs to the PERSON
    span, as in TAB), per name its script group and the name's own characters, and the words of
    the held-out lists its names were made of."""

    kind: str
    text: str = ""
    spans: list[Span] = field(default_factory=list)
    names: list[tuple[str, int, int]] = field(default_factory=list)
    name_words: list[str] = field(default_factory=list)


class _Maker:
    """Draws the values of the slots (names round-robin over the script groups, so each group
    gets the same number of names)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.fakers = {loc: Faker(loc) for loc in ("de_DE", "pl_PL", "fr_FR", "it_IT", "no_NO", "sv_SE",
                                                   "da_DK", "en_GB")}
        for i, f in enumerate(self.fakers.values()):
            f.seed_instance(seed * 100 + i)
        self.turn = seed

    def name(self) -> tuple[str, str, list[str]]:
        group = SCRIPT_GROUPS[self.turn % len(SCRIPT_GROUPS)]
        self.turn += 1
        name, words = person(self.rng, group, "heldout")
        return name, group, words

    def address(self) -> str:
        rng, f = self.rng, self.fakers
        n = rng.randint(1, 120)
        kind = rng.choice(("pl", "de", "fr", "it", "scand"))
        if kind == "pl":
            town = f["pl_PL"]
            return f"ul. {town.street_name()} {n}, {town.postcode()} {town.city()}"
        if kind == "de":
            town = f["de_DE"]
            return f"{town.street_name()} {n}, {town.postcode()} {town.city()}"
        if kind == "fr":
            town = f["fr_FR"]
            return f"{n} {town.street_name()}, {town.postcode()} {town.city()}"
        if kind == "it":
            town = f["it_IT"]
            street = rng.choice((town.last_name(), f"{town.first_name()} {town.last_name()}", self.italian_town()))
            form = rng.choice(("Via", "Viale", "Corso", "Piazza"))
            return f"{form} {street} {n}, {town.postcode()} {self.italian_town()}"
        loc, word = rng.choice((("no_NO", " gate"), ("no_NO", "gata"), ("sv_SE", "gatan"), ("da_DK", "vej")))
        town = f[loc]
        base = town.last_name() + ("s" if word == " gate" else "")
        return f"{base}{word} {n}, {town.postcode()} {town.city()}"

    def italian_town(self) -> str:
        return self.rng.choice(ITALIAN_TOWNS)

    def organisation(self) -> str:
        rng, f = self.rng, self.fakers
        return rng.choice((
            f"Szpital Uniwersytecki im. {f['pl_PL'].last_name()}",
            f"Klinikum {f['de_DE'].city()}",
            f"Hôpital {f['fr_FR'].last_name()}",
            f"Ospedale {self.italian_town()}",
            f"{f['no_NO'].city()} universitetssykehus",
            f"{f['en_GB'].city()} General Hospital",
        ))

    def date(self) -> str:
        rng = self.rng
        return rng.choice((f"{rng.randint(1, 28)} {rng.choice(MONTHS)} {rng.randint(1940, 2025)}",
                           f"{rng.randint(1, 28):02d}/{rng.randint(1, 12):02d}/{rng.randint(1940, 2025)}"))

    def number(self) -> str:
        return f"{self.rng.randint(100, 999)} {self.rng.randint(100, 999)} {self.rng.randint(1000, 9999)}"

    def phone(self) -> str:
        rng = self.rng
        return f"+{rng.choice((44, 48, 49, 33, 39, 47))} {rng.randint(20, 99)} {rng.randint(1000, 9999)} " \
               f"{rng.randint(1000, 9999)}"


def _letter(kind: str, maker: _Maker) -> Letter:
    letter = Letter(kind)
    template, pos = LETTERS[kind], 0
    for m in _SLOT.finditer(template):
        letter.text += template[pos:m.start()]
        pos = m.end()
        slot = m.group(1)
        start = len(letter.text)
        if slot in "PT":
            name, group, words = maker.name()
            letter.name_words.extend(words)
            title = f"{maker.rng.choice(TITLES)} " if slot == "T" else ""
            letter.names.append((group, start + len(title), start + len(title) + len(name)))
            value, label = title + name, "PERSON"
        elif slot == "R":
            value, label = maker.rng.choice(RELATIONS), ""
        elif slot == "S":
            value, label = maker.rng.choice(SPECIALTIES), ""
        else:
            value = {"A": maker.address, "O": maker.organisation, "D": maker.date, "N": maker.number,
                     "F": maker.phone}[slot]()
            label = _LABELS[slot]
        letter.text += value
        if label:
            letter.spans.append(Span(start, start + len(value), label))
    letter.text += template[pos:]
    return letter


def letters(documents: int = 120, seed: int = 0) -> list[Letter]:
    """``documents`` letters, the four kinds in turn; the same seed and Faker version give the same."""
    maker = _Maker(seed)
    kinds = list(LETTERS)
    return [_letter(kinds[i % len(kinds)], maker) for i in range(documents)]


def score(tagger, docs: list[Letter]) -> dict:
    """Character recall of gold PERSON per script group (the names' own characters, found under
    any label, as TAB's metric counts them), the share of those characters found with the label
    PERSON, overall recall and precision over every gold span, recall per gold label, and the
    tagging time."""
    texts = {str(i): d.text for i, d in enumerate(docs)}
    start = time.perf_counter()
    predicted = {str(i): tagger.tag(d.text) for i, d in enumerate(docs)}
    seconds = time.perf_counter() - start
    overall = char_scores(texts, {str(i): d.spans for i, d in enumerate(docs)}, predicted)
    names = {str(i): [Span(a, b, group) for group, a, b in d.names] for i, d in enumerate(docs)}
    by_script = char_scores(texts, names, predicted).recall_by_label
    people = {k: [s for s in spans if s.label == "PERSON"] for k, spans in predicted.items()}
    as_person = char_scores(texts, names, people).recall_by_label
    return {"documents": len(docs), "characters": sum(map(len, texts.values())), "seconds": round(seconds, 3),
            "person_recall_by_script": {g: round(by_script[g], 4) for g in SCRIPT_GROUPS},
            "person_labelled_person_by_script": {g: round(as_person[g], 4) for g in SCRIPT_GROUPS},
            "recall": round(overall.recall, 4), "precision": round(overall.precision, 4),
            "recall_by_label": {k: round(v, 4) for k, v in overall.recall_by_label.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=120)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tagger", default="auto")
    parser.add_argument("--model-dir", help="a CRF folder other than the shipped one (model / auto)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    options = {"model_dir": args.model_dir} if args.model_dir else {}
    result = score(get_tagger(args.tagger, **options), letters(args.documents, args.seed))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['documents']} letters, {result['characters']} characters, tagged in {result['seconds']} s")
    for group, recall in result["person_recall_by_script"].items():
        labelled = result["person_labelled_person_by_script"][group]
        print(f"  PERSON recall, {group:<10} {recall:.3f}   (labelled PERSON {labelled:.3f})")
    print(f"  recall {result['recall']:.3f}   precision {result['precision']:.3f}")
    for label, recall in result["recall_by_label"].items():
        print(f"  recall, gold {label:<8} {recall:.3f}")


if __name__ == "__main__":
    main()
