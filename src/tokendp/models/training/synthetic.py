"""Synthetic PII-dense documents with entity spans, generated with Faker.

A document is a sequence of sentences drawn from domain templates (letters, medical, court,
HR, case summaries); :meth:`SyntheticDocs.paragraphs` lays one out in paragraphs, letters and
e-mails opening on a salutation and ending on their closing (the rewriter's data). Slots
``{LABEL:kind}`` are filled by Faker; each filled slot becomes a :class:`~tokendp.text.spans.Span`
with a TAB-style label (PERSON, CODE, LOC, ORG, DATETIME, QUANTITY, DEM, MISC) and keeps its slot
kind, so :meth:`SyntheticDocs.value` can draw fresh values of the same kind for the fill objective.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from tokendp._optional import require
from tokendp.text.spans import Span

Faker = require("faker", "train", "training the default model").Faker

_LOCALES = ["en_GB", "en_US", "en_IE", "de_DE", "fr_FR", "it_IT", "es_ES", "pl_PL", "nl_NL",
            "tr_TR", "sv_SE", "pt_PT", "cs_CZ", "ro_RO", "hu_HU"]
_DATE_FORMATS = ["%d %B %Y", "%B %d, %Y", "%d/%m/%Y", "%m/%d/%Y", "%Y-%m-%d", "%d.%m.%Y",
                 "%-d %b %Y", "%d %b. %Y", "%A, %d %B %Y", "%B %Y", "%Y"]
_SLOT = re.compile(r"\{([A-Z]+):([a-z_]+)\}")

_TEMPLATES: dict[str, list[str]] = {
    "court": [
        "The applicant, {PERSON:title_name}, was born in {DATETIME:year} and lives in {LOC:city}.",
        "The case originated in an application (no. {CODE:app_no}) against {LOC:country} lodged with the Court on {DATETIME:date}.",
        "The applicant was represented by {PERSON:name}, a lawyer practising in {LOC:city}.",
        "On {DATETIME:date} the {ORG:court} dismissed the appeal lodged by {PERSON:name}.",
        "The Government were represented by their Agent, {PERSON:title_name}, of the {ORG:ministry}.",
        "On {DATETIME:date} the police arrested {PERSON:name} at {LOC:address}.",
        "The {ORG:court} sentenced him to {QUANTITY:years} of imprisonment on {DATETIME:date}.",
        "The applicant claimed {QUANTITY:money} in respect of non-pecuniary damage.",
        "Case no. {CODE:case_no} was adjourned until {DATETIME:date} at the request of {PERSON:name}.",
        "According to the applicant, she was held in cell no. {CODE:small_no} of the {ORG:facility} until {DATETIME:date}.",
        "The prosecutor, {PERSON:name}, refused to open criminal proceedings on {DATETIME:date}.",
        "The judgment became final on {DATETIME:date}.",
        "The applicant's {DEM:relative}, {PERSON:name}, gave evidence before the {ORG:court}.",
        "The hearing took place in {LOC:city} on {DATETIME:date}, and the applicant was {DEM:age} at the time.",
    ],
    "medical": [
        "Patient: {PERSON:name}, DOB {DATETIME:dob}, MRN {CODE:mrn}.",
        "{PERSON:title_name} was admitted to {ORG:hospital} on {DATETIME:date} with chest pain.",
        "The patient, a {DEM:age} {DEM:nationality} {DEM:occupation}, reports shortness of breath since {DATETIME:date}.",
        "Referred by {PERSON:doctor} ({ORG:hospital}, tel. {CODE:phone}).",
        "Discharged on {DATETIME:date}; follow-up with {PERSON:doctor} in {QUANTITY:weeks}.",
        "Home address: {LOC:address}. Emergency contact: {PERSON:name}, {CODE:phone}.",
        "Insurance policy {CODE:policy} covers {QUANTITY:percent} of the treatment costs.",
        "Blood pressure was {QUANTITY:bp} and the patient weighed {QUANTITY:kg}.",
        "She was prescribed {MISC:drug} {QUANTITY:dose} twice daily from {DATETIME:date}.",
    ],
    "hr": [
        "Employee {PERSON:name} (ID {CODE:emp_id}) joined {ORG:company} on {DATETIME:date} as {DEM:job}.",
        "Annual salary: {QUANTITY:money}, paid to IBAN {CODE:iban}.",
        "Please contact {PERSON:name} at {CODE:email} or {CODE:phone} before {DATETIME:date}.",
        "The disciplinary meeting with {PERSON:title_name} took place at {LOC:address} on {DATETIME:date}.",
        "{PERSON:name} reports to {PERSON:name}, head of the {ORG:department} department.",
        "Sick leave from {DATETIME:date} to {DATETIME:date} was approved by {PERSON:name}.",
        "National insurance number: {CODE:ssn}. Date of birth: {DATETIME:dob}.",
    ],
    "letter": [
        "Dear {PERSON:title_name},",
        "Thank you for your letter of {DATETIME:date} regarding account {CODE:account}.",
        "We confirm that {QUANTITY:money} was transferred to {ORG:company} on {DATETIME:date}.",
        "Your application reference {CODE:ref} has been forwarded to our office in {LOC:city}.",
        "Please send the signed documents to {LOC:address} by {DATETIME:date}.",
        "If you have any questions, call {PERSON:name} on {CODE:phone} or write to {CODE:email}.",
        "Yours sincerely, {PERSON:name}, {DEM:job}, {ORG:company}.",
        "We met {PERSON:name} in {LOC:city} on {DATETIME:date} to discuss the lease of {LOC:address}.",
    ],
    "summary": [
        "{PERSON:name}, a {DEM:age} {DEM:nationality} national, arrived in {LOC:country} in {DATETIME:month_year}.",
        "She worked for {ORG:company} in {LOC:city} from {DATETIME:year} until {DATETIME:year}.",
        "The claim (reference {CODE:ref}) concerned {QUANTITY:money} owed by {ORG:company}.",
        "{PERSON:name} and {PERSON:name} were married in {LOC:city} on {DATETIME:date}.",
        "The vehicle, registration {CODE:plate}, was seized on {DATETIME:date} near {LOC:city}.",
        "{ORG:company} is registered at {LOC:address} under number {CODE:company_no}.",
        "The witness, {PERSON:name}, stated that the meeting lasted {QUANTITY:hours}.",
    ],
}

PARAGRAPH_BREAK = "\n\n"
# Letters and e-mails in paragraphs (SyntheticDocs.paragraphs): (salutations, body sentences,
# closings). The closing is always the last paragraph, its signature the document's last line.
_CORRESPONDENCE: dict[str, tuple[list[str], list[str], list[str]]] = {
    "letter": (
        ["Dear {PERSON:title_name},", "Dear Sir or Madam,"],
        [s for s in _TEMPLATES["letter"] if not s.startswith(("Dear ", "Yours "))],
        ["Yours sincerely,\n{PERSON:name}", "Yours sincerely,\n{PERSON:title_name}\n{DEM:job}, {ORG:company}",
         "Yours faithfully,\n{PERSON:name}", "Kind regards,\n{PERSON:name}\n{ORG:company}"],
    ),
    "email": (
        ["Dear {PERSON:name},", "Hello {PERSON:title_name},", "Hi {PERSON:name},"],
        [
            "Thank you for your e-mail of {DATETIME:date} about invoice {CODE:ref}.",
            "I attach the contract with {ORG:company} that we discussed on {DATETIME:date}.",
            "Could you send the updated figures to {CODE:email} before {DATETIME:date}?",
            "{PERSON:name} will join the call from our office in {LOC:city}.",
            "The payment of {QUANTITY:money} should reach account {CODE:account} within {QUANTITY:weeks}.",
            "If anything is unclear, you can reach me on {CODE:phone}.",
            "We will meet at {LOC:address} on {DATETIME:date}.",
        ],
        ["Best regards,\n{PERSON:name}", "Yours sincerely,\n{PERSON:name}", "Kind regards,\n{PERSON:name}\n{DEM:job}"],
    ),
}


@dataclass(frozen=True)
class Document:
    """A synthetic document: text, its entity spans, and the slot kinds behind each span."""

    text: str
    spans: tuple[Span, ...]
    kinds: tuple[str, ...]


class SyntheticDocs:
    """Generator of synthetic documents; all randomness comes from ``seed``."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.fakers = [Faker(loc) for loc in _LOCALES]
        for i, f in enumerate(self.fakers):
            f.seed_instance(seed * 1000 + i)
            for provider in f.providers:
                # Faker's it_IT builds its city list from a set: its order (and so every draw
                # after the first Italian city) would follow Python's per-process hash seed.
                if isinstance(getattr(provider, "cities", None), list):
                    provider.cities = sorted(provider.cities)

    def _fake(self) -> Faker:
        # English locales twice as likely: the prose around the entities is English.
        return self.fakers[0] if self.rng.random() < 0.3 else self.rng.choice(self.fakers)

    def _date(self) -> str:
        d = self.fakers[0].date_between(start_date="-60y", end_date="+2y")
        return d.strftime(self.rng.choice(_DATE_FORMATS[:-2]))

    def value(self, kind: str) -> str:
        """A fresh random value for one slot kind."""
        f, r = self._fake(), self.rng
        makers = {
            "name": lambda: f.name(),
            "first_name": lambda: f.first_name(),
            "surname": lambda: f.last_name(),
            "title_name": lambda: f"{r.choice(['Mr', 'Mrs', 'Ms', 'Dr', 'Prof.'])} {f.last_name()}",
            "doctor": lambda: f"Dr {f.first_name()} {f.last_name()}",
            "year": lambda: str(r.randint(1930, 2024)),
            "date": self._date,
            "dob": self._date,
            "month_year": lambda: self.fakers[0].date_between("-40y").strftime("%B %Y"),
            "city": lambda: f.city(),
            "country": lambda: self.fakers[0].country(),
            "address": lambda: f.address().replace("\n", ", "),
            "app_no": lambda: f"{r.randint(100, 99999)}/{r.randint(90, 124) % 100:02d}",
            "case_no": lambda: f"{r.randint(1, 9)}-{r.randint(100, 9999)}/{r.randint(1995, 2024)}",
            "small_no": lambda: str(r.randint(1, 400)),
            "mrn": lambda: f"{r.choice('ABCDEFGHJK')}{r.randint(1000000, 9999999)}",
            "phone": lambda: f.phone_number(),
            "email": lambda: self.fakers[0].email(),
            "policy": lambda: self.fakers[0].bothify("??-####-####").upper(),
            "emp_id": lambda: self.fakers[0].bothify("E#####"),
            "iban": lambda: self.fakers[0].iban(),
            "ssn": lambda: self.fakers[0].ssn(),
            "account": lambda: self.fakers[0].bban(),
            "ref": lambda: self.fakers[0].bothify("???/####/##").upper(),
            "plate": lambda: f.license_plate(),
            "company_no": lambda: str(r.randint(1000000, 99999999)),
            "court": lambda: f"{r.choice(['Regional', 'District', 'Supreme', 'Constitutional', 'Administrative'])} Court of {f.city()}",
            "ministry": lambda: f"Ministry of {r.choice(['Justice', 'Foreign Affairs', 'the Interior', 'Health'])}",
            "facility": lambda: f"{f.city()} {r.choice(['remand centre', 'prison', 'detention facility'])}",
            "hospital": lambda: f"{f.city()} {r.choice(['General Hospital', 'University Clinic', 'Medical Centre'])}",
            "company": lambda: f.company(),
            "department": lambda: r.choice(["finance", "legal", "sales", "research", "IT", "logistics"]),
            "years": lambda: f"{r.randint(1, 15)} years",
            "weeks": lambda: f"{r.randint(1, 12)} weeks",
            "hours": lambda: f"{r.randint(1, 9)} hours",
            "money": lambda: f"{r.choice(['EUR', '€', '£', '$', 'USD'])}{r.choice(['', ' '])}{r.randint(100, 250000):,}",
            "percent": lambda: f"{r.randint(5, 100)}%",
            "bp": lambda: f"{r.randint(95, 180)}/{r.randint(55, 110)} mmHg",
            "kg": lambda: f"{r.randint(45, 130)} kg",
            "dose": lambda: f"{r.choice([5, 10, 20, 50, 100, 250, 500])} mg",
            "drug": lambda: r.choice(["amoxicillin", "metformin", "lisinopril", "atorvastatin", "ibuprofen", "omeprazole"]),
            "age": lambda: f"{r.randint(18, 90)}-year-old",
            "nationality": lambda: r.choice(["Turkish", "Polish", "French", "Italian", "Russian", "Romanian", "British", "German", "Ukrainian"]),
            "occupation": lambda: self.fakers[0].job().lower(),
            "job": lambda: self.fakers[0].job(),
            "relative": lambda: r.choice(["wife", "husband", "son", "daughter", "mother", "father", "brother", "sister"]),
        }
        return makers[kind]()

    def _sentences(self, pool: list[str], max_sentences: int) -> list[str]:
        """1..max_sentences sentence templates of ``pool``, in a random order (repeating past its size)."""
        n = self.rng.randint(1, max(1, max_sentences))
        order = self.rng.sample(pool, len(pool))
        return [order[i % len(order)] for i in range(n)]

    def _render(self, template: str) -> Document:
        """``template`` with every slot filled by a fresh value of its kind, and the values' spans."""
        text, spans, kinds, pos = "", [], [], 0
        for m in _SLOT.finditer(template):
            text += template[pos:m.start()]
            value = self.value(m.group(2))
            spans.append(Span(len(text), len(text) + len(value), m.group(1)))
            kinds.append(m.group(2))
            text += value
            pos = m.end()
        return Document(text + template[pos:], tuple(spans), tuple(kinds))

    def document(self, max_sentences: int) -> Document:
        """A document of 1..max_sentences sentences from one domain, joined by a space or a newline."""
        domain = self.rng.choice(sorted(_TEMPLATES))
        sentences = self._sentences(_TEMPLATES[domain], max_sentences)
        return self._render("".join((("\n" if self.rng.random() < 0.15 else " ") if i else "") + sentence
                                    for i, sentence in enumerate(sentences)))

    def paragraphs(self, max_sentences: int, paragraphs: int) -> Document:
        """A document of 1..max_sentences sentences from one domain in ``paragraphs`` paragraphs (at
        most one per sentence) joined by a blank line. A letter or an e-mail also opens on a
        salutation paragraph and ends on its closing paragraph ("Yours sincerely,\nNAME")."""
        domain = self.rng.choice(sorted({*_TEMPLATES, *_CORRESPONDENCE}))
        salutations, body, closings = _CORRESPONDENCE[domain] if domain in _CORRESPONDENCE else ((), _TEMPLATES[domain], ())
        sentences = self._sentences(body, max_sentences)
        cuts = sorted(self.rng.sample(range(1, len(sentences)), min(paragraphs, len(sentences)) - 1))
        parts = [" ".join(sentences[a:b]) for a, b in zip([0, *cuts], [*cuts, len(sentences)])]
        if salutations:
            parts = [self.rng.choice(salutations), *parts, self.rng.choice(closings)]
        return self._render(PARAGRAPH_BREAK.join(parts))
