"""Synthetic English training notes that name people in many scripts, with their gold spans.

The CRF's other training data, TAB's judgments, name almost only Latin-script people. These
short notes put names of every script group of :mod:`~tokendp.text.taggers.name_lists`
(always its "train" part) into English sentences, so that the model learns what the Unicode
script, the name gazetteer and the context ("Mr", "seen by", "son of") say about a name. Some
sentences start with a capitalised common word ("Quick", "Plan") that is not a name.

The sentences here are written for training only; the evaluation letters of
``benchmarks/multilingual_tagger.py`` use other wording and the "heldout" names.
"""

from __future__ import annotations

import random
import re

from tokendp.text.spans import Span
from tokendp.text.taggers.name_lists import SCRIPT_GROUPS, person

# {P}: a person (PERSON, with a title when one is drawn), {O}: an organisation (ORG), {D}: a date,
# {N}: a record number (CODE).
SENTENCES: tuple[str, ...] = (
    "{P} rang the ward at noon.",
    "{P} says that {P} hit him.",
    "{P} is a retired teacher who lives alone.",
    "After the fall {P} stayed with {P} for a week.",
    "Transferred from {O} on {D}.",
    "{P} works at {O} as a cleaner.",
    "Letter copied to {O} and to {P}.",
    "Discussed at the {O} meeting; {P} agreed.",
    "{P} and {P} were both present.",
    "Yesterday {P} told the officer that she was afraid.",
    "{P} attended with {P} on {D}.",
    "The interpreter, {P}, translated for the family.",
    "According to {P}, the fall happened at night.",
    "{P} was reviewed by {P} in the morning.",
    "Next of kin: {P} (wife), telephone on file.",
    "Patient: {P}",
    "Name: {P}   Record: {N}",
    "We spoke to {P} and her brother {P} by phone.",
    "Quick update: {P} called to ask about the results.",
    "Quick question from {P} about the dressing.",
    "Plan: repeat bloods in two weeks and review with {P}.",
    "Seen today with {P}, who is the main carer.",
    "cc: {P}, {P}",
    "Signed: {P}",
    "{P} reports that {P} left the flat at about nine.",
    "The son of {P} asked for a copy of the notes.",
    "Mother: {P}. Father: {P}.",
    "Consent was given by {P} on {D}.",
    "Impression: likely viral illness. Discussed with {P}.",
    "Overall, {P} is improving and wishes to go home.",
    "Statement of {P}, taken on {D}.",
    "I, {P}, confirm that this account is true.",
    "Present: {P}, {P} and {P}.",
    "Handover from {P} to {P} at the end of the shift.",
    "Kind regards,\n{P}",
    "Please note that {P} does not drive.",
    "Care coordinator {P} will visit on {D}.",
    "Her neighbour, {P}, found her on the floor.",
    "Note: {P} prefers to be called by her first name.",
    "Thanks to {P} for the detailed history.",
    "Appointment booked with {O} for {D}.",
    "{P} confirmed the address with {P}.",
)
ORGANISATIONS = ("{} Medical Centre", "the {} Practice", "{} House Surgery", "{} & {} Solicitors",
                 "{} Street Pharmacy", "St {}'s Hospice")
TITLES = ("Mr", "Mrs", "Ms", "Dr", "Prof.", "Mr.", "Dr.")
# Latin-script names twice as often: unseen ones have no script to tell them from organisations.
NAME_GROUPS = SCRIPT_GROUPS + ("Latin",)
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")
_SLOT = re.compile(r"\{([PODN])\}")


def _fill(kind: str, rng: random.Random) -> tuple[str, str]:
    if kind == "P":
        name, _ = person(rng, rng.choice(NAME_GROUPS), "train")
        return (f"{rng.choice(TITLES)} {name}" if rng.random() < 0.4 else name), "PERSON"
    if kind == "O":
        words = [person(rng, "Latin", "train")[0].split()[-1] for _ in range(2)]
        return rng.choice(ORGANISATIONS).format(*words), "ORG"
    if kind == "D":
        return f"{rng.randint(1, 28)} {rng.choice(MONTHS)} {rng.randint(1990, 2025)}", "DATETIME"
    return f"{rng.choice('ABHKMRX')}{rng.choice('ABHKMRX')}-{rng.randint(100000, 999999)}", "CODE"


def note(rng: random.Random, sentences: int = 4) -> tuple[str, list[Span]]:
    """One note of ``sentences`` sentences, and its gold spans (TAB labels)."""
    text, spans = "", []
    for i in range(sentences):
        template = rng.choice(SENTENCES)
        text += "" if i == 0 else ("\n" if rng.random() < 0.3 else " ")
        pos = 0
        for m in _SLOT.finditer(template):
            text += template[pos:m.start()]
            value, label = _fill(m.group(1), rng)
            spans.append(Span(len(text), len(text) + len(value), label))
            text += value
            pos = m.end()
        text += template[pos:]
    return text, spans


def notes(count: int, seed: int = 0) -> tuple[list[str], list[list[Span]]]:
    """``count`` notes from ``seed`` (the same seed and Faker version give the same notes)."""
    rng = random.Random(seed)
    made = [note(rng, rng.randint(2, 6)) for _ in range(count)]
    return [t for t, _ in made], [s for _, s in made]
