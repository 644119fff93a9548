"""Coherent fillers for the rewriter's training targets: fresh entities that respect the
document's public structure.

A target replaces every hidden span of a training paragraph with a fresh value of its label.
Drawn one by one, such values contradict each other and the text around them ("born on
17 Apr. 2025 ... admitted on 1987-04-08", "Mr Anna Kovacs ... she", a Polish street with a
Hungarian postcode), and a model trained on them learns to write incoherent rewrites. One
:class:`CoherentFillers` per example draws a small *world* first and fills every slot from it:

- **one locale** (a Faker locale, with its country): every name, street, postcode and city of
  the example comes from it, so the parts of an address agree; the first country mentioned is
  the locale's own, later distinct ones are other countries;
- **a timeline**: an anchor date; every date slot is an event in the 12 years before it,
  events in document order ascending, except a slot whose public left context speaks of birth
  (``born``, ``birth``, ``DOB``), which is 18 to 90 years before the first event. So a birth always comes
  before an admission and a discharge never before its admission; each filler keeps the
  original's format (``12 March 1961``, ``1961-03-12``, ``March 1961``, ``1961``, ``1990s``);
- **genders from the public text**: a PERSON slot's gender comes from a title just before the
  slot (``Mr``, ``Ms``...) else the pronouns after it up to the next PERSON slot (``he``/``his``
  vs ``she``/``her``), else the original's title, else a coin; its first name and any title in
  the slot agree with it (``Dr``, ``Judge``, ``Prof`` are kept);
- **distinct entities, distinct fillers**: the same original string gets the same filler and a
  shared surname the same surname (``Mr Smith`` / ``John Smith``); different originals of a
  label never share a filler, so no single filler serves every slot of a label.

What the model reads is only the public row (labels, lengths, the text outside the spans):
which slots name the same entity is never shown (docs/privacy.md). The targets use the
training paragraph's own identities (public training data), so the model learns how often
slots co-refer, not which do.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from datetime import date, timedelta

from tokendp.models.training.synthetic import _LOCALES, SyntheticDocs
from tokendp.text.spans import Span

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
COUNTRY_OF = {"en_GB": "the United Kingdom", "en_US": "the United States", "en_IE": "Ireland", "de_DE": "Germany",
              "fr_FR": "France", "it_IT": "Italy", "es_ES": "Spain", "pl_PL": "Poland", "nl_NL": "the Netherlands",
              "tr_TR": "Turkey", "sv_SE": "Sweden", "pt_PT": "Portugal", "cs_CZ": "the Czech Republic",
              "ro_RO": "Romania", "hu_HU": "Hungary"}
OTHER_COUNTRIES = ["Russia", "Ukraine", "Bulgaria", "Croatia", "Slovakia", "Greece", "Moldova", "Georgia",
                   "Armenia", "Azerbaijan", "Lithuania", "Latvia", "Estonia", "Finland", "Norway", "Austria",
                   "Slovenia", "Serbia", "Albania", "Cyprus", "Malta", "Belgium", "Switzerland", "Denmark"]
_KNOWN_COUNTRIES = {c.removeprefix("the ").lower() for c in [*COUNTRY_OF.values(), *OTHER_COUNTRIES]} | {
    "czech republic", "united kingdom", "netherlands", "russian federation"}
MALE_TITLES, FEMALE_TITLES = ("Mr",), ("Ms", "Mrs")
_TITLE = re.compile(r"^(?:the )?(Mr|Mrs|Ms|Miss|Dr|Prof|Judge)\.?\s+")
_TITLE_BEFORE = re.compile(r"\b(Mr|Mrs|Ms|Miss)\.?\s*$")
_HE, _SHE = re.compile(r"\b(he|him|his|himself)\b", re.I), re.compile(r"\b(she|her|hers|herself)\b", re.I)
_BIRTH = re.compile(r"\b(born|birth|dob|d\.o\.b)\b", re.I)
_MONTH = re.compile(r"\b(" + "|".join(MONTHS) + "|" + "|".join(m[:3] for m in MONTHS) + r")\b\.?")
_NUMERIC_DMY = re.compile(r"\b(\d{1,2})([./-])(\d{1,2})\2(\d{4})\b")
_NUMERIC_YMD = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b")
_YEAR = re.compile(r"\b(1[89]\d\d|20\d\d)(s?)\b")
_DAY = re.compile(r"\b(\d{1,2})(st|nd|rd|th)?\b")
_POSTCODE = re.compile(r"^[A-Z]{0,2}-?\d[\d\s-]{2,7}[A-Z]{0,2}$")
NATIONALITIES = ["Turkish", "Russian", "Polish", "Ukrainian", "Romanian", "Bulgarian", "Italian", "French", "German",
                 "Croatian", "Slovak", "Hungarian", "Greek", "Moldovan", "Georgian", "Armenian", "Lithuanian",
                 "Latvian", "Finnish", "Swedish", "Portuguese", "Spanish", "Austrian", "Serbian", "British", "Irish",
                 "Kurdish", "Chechen", "Roma", "Dutch", "Belgian", "Czech"]
RELATIVES = ["wife", "husband", "son", "daughter", "mother", "father", "brother", "sister", "uncle", "aunt", "cousin",
             "grandmother", "grandfather", "nephew", "niece"]
_NUMBER_WORDS = ["two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]


def is_date_shaped(text: str) -> bool:
    """Whether ``text`` names a point in time this module can redraw (a year or a month)."""
    return bool(_YEAR.search(text) or _MONTH.search(text) or _NUMERIC_DMY.search(text))


def format_like(original: str, when: date) -> str:
    """``when`` written in the format of ``original`` (its numeric layout, month names full or
    abbreviated, years, decades, days with or without ordinal suffixes)."""
    if m := _NUMERIC_DMY.search(original):
        width = len(m.group(1))
        return original[:m.start()] + (f"{when.day:0{width}d}{m.group(2)}{when.month:0{len(m.group(3))}d}"
                                       f"{m.group(2)}{when.year}") + original[m.end():]
    if m := _NUMERIC_YMD.search(original):
        return (original[:m.start()] + f"{when.year}-{when.month:0{len(m.group(2))}d}-{when.day:0{len(m.group(3))}d}"
                + original[m.end():])
    out = _YEAR.sub(lambda y: f"{when.year // 10 * 10}s" if y.group(2) else str(when.year), original)
    has_month = bool(_MONTH.search(out))
    out = _MONTH.sub(lambda mo: MONTHS[when.month - 1] if mo.group().rstrip(".") in MONTHS
                     else MONTHS[when.month - 1][:3] + ("." if mo.group().endswith(".") else ""), out)
    if has_month:
        out = _DAY.sub(lambda d: d.group() if len(d.group(1)) > 2 or int(d.group(1)) > 31
                       else str(when.day) + (_ordinal(when.day) if d.group(2) else ""), out)
    return out


def _ordinal(day: int) -> str:
    return "th" if 10 <= day % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")


def _between(rng: random.Random, lo: date, hi: date) -> date:
    return lo + timedelta(days=rng.randint(0, max(0, (hi - lo).days)))


class CoherentFillers:
    """Fillers for the ``spans`` of ``text``, one world per example (see the module docstring).

    ``fill(i)`` is span i's filler; ``kinds`` (the synthetic generator's slot kinds, optional)
    refine what a slot is (``dob``, ``address``, ``city``...). ``locale`` picks the locale
    (tests); else it is drawn from ``rng``.
    """

    def __init__(self, synth: SyntheticDocs, rng: random.Random, text: str, spans: Sequence[Span],
                 kinds: Sequence[str] | None = None, *, locale: str | None = None) -> None:
        self.synth, self.rng, self.text, self.spans = synth, rng, text, list(spans)
        self.kinds = list(kinds) if kinds is not None else [""] * len(self.spans)
        index = _LOCALES.index(locale) if locale is not None else rng.randrange(len(_LOCALES))
        self.locale, self.fake = _LOCALES[index], synth.fakers[index]
        self.anchor = date(rng.randint(1998, 2024), rng.randint(1, 12), rng.randint(1, 28))
        self.memo: dict[tuple[str, str], str] = {}
        self.surnames: dict[str, str] = {}
        self.used: dict[str, set[str]] = {}
        self.places: dict[str, str] = {}  # original (lower-case) -> filler, cities and countries
        self.dates = self._timeline()

    # ------------------------------------------------------------------ public structure
    def role(self, i: int) -> str:
        """``"birth"`` when the 40 characters before span i (public text) speak of birth, else ``"event"``."""
        if self.kinds[i] == "dob":
            return "birth"
        s = self.spans[i]
        return "birth" if _BIRTH.search(self.text[max(0, s.start - 40):s.start]) else "event"

    def gender(self, i: int) -> str:
        """``"m"`` or ``"f"`` for PERSON span i: a title just before it, else the pronouns after it
        up to the next PERSON span (200 characters at most), else its own title, else a coin."""
        s = self.spans[i]
        if m := _TITLE_BEFORE.search(self.text[max(0, s.start - 6):s.start]):
            return "m" if m.group(1) == "Mr" else "f"
        nxt = min([t.start for t in self.spans if t.label == "PERSON" and t.start >= s.end] + [s.end + 200])
        after = self.text[s.end:nxt]
        he, she = len(_HE.findall(after)), len(_SHE.findall(after))
        if he != she:
            return "m" if he > she else "f"
        if m := _TITLE.match(self.text[s.start:s.end]):
            if m.group(1) in ("Mr", "Mrs", "Ms", "Miss"):
                return "m" if m.group(1) == "Mr" else "f"
        return self.rng.choice("mf")

    def _timeline(self) -> dict[int, date]:
        """A date per date-shaped DATETIME span: events in the 12 years before the anchor,
        ascending in document order; births 18-90 years before the first event; equal originals,
        equal dates."""
        slots = [i for i, s in enumerate(self.spans)
                 if s.label in ("DATETIME", "DATE") and is_date_shaped(self.text[s.start:s.end])]
        key = {i: self.text[self.spans[i].start:self.spans[i].end].strip().lower() for i in slots}
        births = {key[i] for i in slots if self.role(i) == "birth"}
        events = list(dict.fromkeys(key[i] for i in sorted(slots, key=lambda j: self.spans[j].start)
                                    if key[i] not in births))
        a, r = self.anchor, self.rng
        start = a - timedelta(days=365 * r.randint(1, 12))
        points = sorted({_between(r, start, a) for _ in range(3 * len(events) + 3)})
        while len(points) < len(events):
            points.append(points[-1] + timedelta(days=1))
        chosen = sorted(r.sample(points, len(events)))
        when = dict(zip(events, chosen))
        first = chosen[0] if chosen else a
        for b in sorted(births):
            when[b] = _between(r, first - timedelta(days=365 * 90), first - timedelta(days=365 * 18 + 5))
        return {i: when[key[i]] for i in slots}

    # ------------------------------------------------------------------ fillers
    def fill(self, i: int) -> str:
        """Span i's filler (memoised by label and original: the same string, the same filler)."""
        s = self.spans[i]
        original = self.text[s.start:s.end]
        key = (s.label, original.strip().lower())
        if key not in self.memo:
            used = self.used.setdefault(s.label, set())
            value = self._fresh(i, original)
            for _ in range(10):  # distinct originals never share a filler
                if value not in used and value.strip().lower() != key[1]:
                    break
                value = self._fresh(i, original)
            used.add(value)
            self.memo[key] = value
        return self.memo[key]

    __call__ = fill

    def _fresh(self, i: int, original: str) -> str:
        label, kind = self.spans[i].label, self.kinds[i]
        if label == "PERSON":
            return self._person(i, original)
        if label in ("DATETIME", "DATE") and i in self.dates:
            return format_like(original, self.dates[i])
        if label == "LOC":
            return self._place(original, kind)
        if label == "ORG":
            return self._org(original)
        if kind:  # a synthetic slot: a fresh value of the same kind
            return self.synth.value(kind)
        return self._shape(label, original)

    def _person(self, i: int, original: str) -> str:
        f, r = self.fake, self.rng
        title = _TITLE.match(original)
        rest = original[title.end():] if title else original
        words = rest.split()
        if original.isupper() and len(original) <= 4:  # initials
            return ".".join(r.choice("ABCDEFGHIJKLMNOPRSTVZ") for _ in original.strip(".").replace(".", "")) + "."
        male = self.gender(i) == "m"
        surname = self.surnames.get(words[-1].lower()) if words else None
        if surname is None:
            taken = set(self.surnames.values())
            surname = f.last_name()
            for _ in range(10):  # distinct surnames for distinct families
                if surname not in taken:
                    break
                surname = f.last_name()
            if words:
                self.surnames[words[-1].lower()] = surname
        first = (f.first_name_male() if male else f.first_name_female()) if len(words) > 1 else ""
        prefix = ""
        if title:
            word = title.group(1)
            if word in ("Mr", "Mrs", "Ms", "Miss"):
                word = r.choice(MALE_TITLES if male else FEMALE_TITLES)
            prefix = ("the " if original.startswith("the ") else "") + word + ("." if title.group().rstrip().endswith(".") else "") + " "
        return prefix + " ".join(w for w in (first, surname) if w)

    def _place(self, original: str, kind: str) -> str:
        f, low = self.fake, original.strip().lower()
        lead = "the " if low.startswith("the ") else ""
        if kind == "country" or low.removeprefix("the ") in _KNOWN_COUNTRIES:
            if low not in self.places:
                if not any(v in COUNTRY_OF.values() for v in self.places.values()):
                    self.places[low] = COUNTRY_OF[self.locale]
                else:
                    self.places[low] = self.rng.choice(OTHER_COUNTRIES)
            country = self.places[low]
            return country if lead or not country.startswith("the ") else country.removeprefix("the ")
        if kind == "address" or ("," in original and any(c.isdigit() for c in original)):
            town = re.sub(r"[\d-]+", "", low.rsplit(",", 1)[-1]).strip()  # "..., 1234 budapest" -> "budapest"
            return f"{f.street_address()}, {f.postcode()} {self.city(town)}"
        if _POSTCODE.match(original.strip()):
            return f.postcode()
        if any(c.isdigit() for c in original):
            return f.street_address()
        return lead + self.city(low)

    def city(self, original: str) -> str:
        """The example's city for ``original``: the first city named is the home city, which an
        address reuses; every distinct city gets its own."""
        key = original or "<home>"
        if key not in self.places:
            home = self.places.get("<home>")
            if home is None:
                home = self.places["<home>"] = self.fake.city()
                self.places.setdefault(key, home)
            else:
                self.places[key] = self.fake.city()
        return self.places[key]

    def _org(self, original: str) -> str:
        low, r = original.lower(), self.rng
        lead = "the " if low.startswith("the ") else ""
        city = self.city("")
        if "court" in low:
            return lead + f"{r.choice(['Regional', 'District', 'Supreme', 'Administrative', 'Appeal'])} Court of {city}"
        if "ministry" in low:
            return lead + f"Ministry of {r.choice(['Justice', 'Foreign Affairs', 'the Interior', 'Health'])}"
        if "prosecutor" in low:
            return lead + f"{city} Public Prosecutor's Office"
        if "police" in low:
            return lead + f"{city} Police Department"
        if "hospital" in low or "clinic" in low:
            return lead + f"{city} {r.choice(['General Hospital', 'University Clinic', 'Medical Centre'])}"
        return lead + self.fake.company()

    def _shape(self, label: str, original: str) -> str:
        """CODE, QUANTITY, DEM, MISC and undated DATETIME: the original's shape, values redrawn."""
        r = self.rng
        if any(c.isdigit() for c in original):  # each run of digits redrawn, a leading 1-9 kept 1-9
            return re.sub(r"\d+", lambda m: "".join(str(r.randint(1 if k == 0 and m.group()[0] != "0" else 0, 9))
                                                     for k in range(len(m.group()))), original)
        words = original.split()
        if words and words[0].lower() in _NUMBER_WORDS + ["one", "a", "an"]:  # "six weeks": a duration
            return " ".join([r.choice(_NUMBER_WORDS), *words[1:]]) if len(words) > 1 else r.choice(_NUMBER_WORDS)
        if label in ("DATETIME", "DATE"):
            return original  # "the same day", "the following year": not a value to redraw
        if label == "DEM":
            if original[:1].isupper():
                return r.choice(NATIONALITIES)
            return r.choice(RELATIVES) if original.lower() in RELATIVES else self.synth.value("occupation")
        if label == "CODE":
            return self.synth.value(r.choice(["app_no", "case_no", "ref"]))
        word = self.synth.fakers[0].word()
        return word.capitalize() if original[:1].isupper() else word
