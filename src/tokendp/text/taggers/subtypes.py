"""Finer labels than TAB's: DATE vs DURATION, OCCUPATION vs other DEM, decided by the span's form.

TAB (Pilán et al., 2022) labels every temporal expression DATETIME ("30 May 1996" and "six
weeks" alike) and every demographic trait DEM ("British", "teacher", "mental illness"). A user
who wants to keep the follow-up interval of a letter, or a job title, needs them apart. TAB's
annotations do not say which is which, so the built-in taggers split the spans by their text:

- DATETIME -> **DURATION** when the span is a length of time: an amount and a unit of time
  ("six weeks", "three-month", "two years and six months", "several weeks", "the next three
  months", "five years' imprisonment"); a span that places the length in time ("three days
  later", "two years ago") or states an age ("two years of age", "eight years old") is a
  **DATE**, as is everything else (dates, times, years, "the following day").
- DEM -> **OCCUPATION** when the span's head word names a job or office ("teacher", "police
  officers", "Secretary of State", "trustee in bankruptcy"): a word from a list of occupations
  or one ending in -ist, -eer, -ician, or -er/-or but not a kinship or other non-job word
  ("sister", "owner", "disorder"); every other DEM stays **DEM**.

The split changes labels only, never which characters are tagged. The head word is the last
word before the first "of", "in", "to", "for", "at" or comma ("president of the court" ->
"president"). Measured accuracy on TAB's gold spans, checked by hand: docs/tagging.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tokendp.text.spans import Span

#: Each finer label and the TAB label it refines.
PARENT: dict[str, str] = {"DATE": "DATETIME", "DURATION": "DATETIME", "OCCUPATION": "DEM"}

_NUM_WORD = (r"(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|"
             r"sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|"
             r"hundred|a|an|half|several|many|few|some|a few|a couple of)")
_NUM = rf"(?:\d+(?:[.,]\d+)?|{_NUM_WORD}(?:[- ]{_NUM_WORD})*(?: and a half)?)"
_UNIT = (r"(?:(?:working |calendar |business |full )?"
         r"(?:second|minute|hour|day|night|week|fortnight|month|year|decade|centur(?:y|ie))s?)")
_PIECE = rf"{_NUM}(?:\s*(?:-|–|to|or)\s*{_NUM})?[- ]{_UNIT}"
_LEAD = (r"(?:(?:almost|nearly|about|approximately|around|roughly|over|under|more than|less than|at least|"
         r"at most|up to|no more than|no less than|some|only|just|a further|another|a total of|a period of|"
         r"(?:the )?(?:next|last|past|first|following|preceding|previous|remaining|whole|entire)|for) )*")
_TAIL = r"(?:['’]s?|s['’])?(?: (?:of )?(?:imprisonment|detention|prison|custody|probation|sentence|leave|work))?"
_DURATION = re.compile(rf"^(?:the )?{_LEAD}{_PIECE}(?:(?:,| and|, and|) {_PIECE})*{_TAIL}\.?$", re.IGNORECASE)
_NOT_DURATION = re.compile(r"\b(?:later|earlier|ago|before|after|afterwards|since|prior|previously|old|of age|"
                           r"aged)\b", re.IGNORECASE)

OCCUPATIONS = frozenset(
    "accountant adviser advisor advocate advokat agent ambassador analyst architect assistant attendant attorney "
    "auditor baker banker barrister bishop builder butcher captain carpenter cashier chairman chairperson "
    "chairwoman chancellor chef chief cleaner clerk coach colonel commander commissioner constable consul "
    "consultant cook correspondent councillor counsel courier curator dean delegate dentist deputy "
    "detective diplomat director doctor driver economist editor employee engineer entrepreneur escort "
    "farmer firefighter fisherman gendarme governor guard headmaster headteacher imam inspector "
    "instructor interpreter investigator janitor journalist judge labourer lawyer lecturer librarian "
    "justice lieutenant magistrate manager mayor mechanic merchant midwife minister nanny notary nurse officer "
    "official paramedic pastor pharmacist photographer physician pilot plumber policeman policewoman "
    "politician president priest principal professor prosecutor psychiatrist psychologist rabbi receiver "
    "rector registrar reporter representative researcher sailor salesman scientist secretary senator "
    "sergeant servant shopkeeper soldier solicitor specialist staff student superintendent supervisor "
    "surgeon surveyor tailor teacher technician trader translator treasurer trustee tutor undersecretary "
    "under-secretary vet veterinarian waiter waitress warden worker".split())
_NOT_OCCUPATION = frozenset(
    "brother mother father daughter sister husband partner member other owner user prisoner foreigner "
    "stranger number disorder murder cancer ulcer fever anger hunger danger minor donor visitor sponsor "
    "neighbour neighbor elder leader follower supporter believer dweller lover smoker drinker offender "
    "survivor successor predecessor ancestor descendant creditor debtor survivor ex-partner character "
    "monster water winter border order letter matter".split())
_HEAD_CUT = re.compile(r"\s+(?:of|in|to|for|at|from|with|on)\s+|,|\(", re.IGNORECASE)
_WORD = re.compile(r"[^\W\d_][\w'’-]*", re.UNICODE)


def datetime_kind(span_text: str) -> str:
    """``"DURATION"`` if ``span_text`` is a length of time (module docstring), else ``"DATE"``."""
    text = " ".join(span_text.split())
    if _NOT_DURATION.search(text) or not _DURATION.match(text):
        return "DATE"
    return "DURATION"


def _head(span_text: str) -> str:
    words = _WORD.findall(_HEAD_CUT.split(span_text, maxsplit=1)[0])
    return words[-1].lower().rstrip("'’").removesuffix("'s").removesuffix("’s") if words else ""


def _singular(word: str) -> str:
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("men"):
        return word[:-3] + "man"
    return word[:-1] if word.endswith("s") and not word.endswith("ss") else word


def dem_kind(span_text: str) -> str:
    """``"OCCUPATION"`` if the head word of ``span_text`` names a job or office, else ``"DEM"``."""
    head = _singular(_head(span_text))
    if not head or head in _NOT_OCCUPATION:
        return "DEM"
    if head in OCCUPATIONS or head.endswith(("ist", "eer", "ician")):
        return "OCCUPATION"
    return "OCCUPATION" if len(head) > 4 and head.endswith(("er", "or")) else "DEM"


def refine_label(label: str, span_text: str) -> str:
    """The finer label of a span: DATETIME -> DATE | DURATION, DEM -> OCCUPATION | DEM, others unchanged."""
    if label == "DATETIME":
        return datetime_kind(span_text)
    if label == "DEM":
        return dem_kind(span_text)
    return label


def refine_labels(spans: Iterable[Span], text: str) -> list[Span]:
    """``spans`` of ``text`` with DATETIME and DEM replaced by their finer labels (same offsets)."""
    return [Span(s.start, s.end, refine_label(s.label, text[s.start:s.end]), s.score, s.source)
            if s.label in ("DATETIME", "DEM") else s for s in spans]
