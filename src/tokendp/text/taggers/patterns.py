"""Regular-expression recognisers, with checksum validation where one exists.

Each recogniser is a compiled pattern, a TAB label, a score and an optional validator; the
span is the match's group ``"v"`` when the pattern defines one (so context such as "no."
or "aged" anchors a match without being tagged), else the whole match. Validators:
Luhn (ISO/IEC 7812-1) for card numbers, ISO 13616 mod-97 for IBANs, calendar ranges for
numeric dates. European street addresses (Polish "ul.", German "Straße", French "rue",
Italian "Via", Scandinavian "gate" / "gatan" / "vej"), with a following postcode and town, and
organisations with a European legal form ("GmbH", "Sp. z o.o.") or hospital word ("Szpital",
"Klinikum", "Hôpital", "Ospedale", "sykehus") use the ``regex`` module's Unicode classes. Codes
are also found by the word before them ("bleep 4417", "account ending 4471", "ext. 315",
"policy no. PP-7710293", "registration KX19 LMV"), with the weaker cue words ("case", "staff",
"record") only when "number", "no.", "ID", "reference" or "code" follows them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import regex

from tokendp.text.spans import Span
from tokendp.text.taggers.resolve import resolve_overlaps
from tokendp.text.taggers.subtypes import refine_labels

MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|December"
          "|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec")
_MONTH = rf"(?:{MONTHS})\.?"
_DAY = r"(?:[12]\d|3[01]|0?[1-9])(?:st|nd|rd|th)?"
_YEAR = r"(?:1[6-9]\d\d|20\d\d)"
NUMBER_WORDS = ("one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen"
                "|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty"
                "|seventy|eighty|ninety|hundred|a hundred|several|a few")
_COUNT = rf"(?:\d+(?:[.,]\d+)?|(?:{NUMBER_WORDS})(?:[- ](?:{NUMBER_WORDS}))*|a|an)"
_UNITS = r"(?:years?|months?|weeks?|days?|hours?|minutes?|seconds?)"
_NUM = r"\d{1,3}(?:[,\u00a0 ]\d{3})+(?:\.\d+)?|\d+(?:[.,]\d+)?"
_CURRENCY_CODES = ("EUR|GBP|USD|SEK|DKK|NOK|CHF|PLN|TRY|TRL|RUB|UAH|FIM|ATS|DEM|FRF|ITL|BEF"
                   "|NLG|ESP|PTE|GRD|HUF|CZK|RON|BGN|HRK|ISK|JPY|CAD|AUD|CYP|MTL|SKK|SIT|LTL|LVL|EEK")
_CURRENCY_WORDS = (r"euros?|pounds?(?: sterling)?|pence|dollars?|cents?|kronor|kroner|krona|krone"
                   r"|zlotys?|zł|francs?|lire|lira|liras|marks?|Deutschmarks?|roubles?|rubles?"
                   r"|hryvnias?|forints?|korunas?|drachmas?|escudos?|pesetas?|schillings?|guilders?"
                   r"|markkas?|lei|levs?|leva|kunas?|yen|Turkish liras|new Turkish liras")
_STREET = (r"Road|Rd\.?|Street|St\.|Avenue|Ave\.?|Lane|Drive|Way|Close|Crescent|Terrace|Gardens|Square"
           r"|Boulevard|Grove|Place|Row|Walk|Mews|Parade|Hill")
_STREET_SUFFIX = r"stra(?:ss|ß)e|gasse|weg|gatan|vägen|gade|vej|veien|straat|laan|steeg|utca|ulica"
# A capitalised word in any cased script ("Piotrkowska", "Łódź", "Jana"), and a postcode with
# its town after a street: "90-001 Łódź", "10115 Berlin", "D-10115 Berlin", "111 22 Stockholm",
# "1050 København K".
_CAP = r"\p{Lu}(?:[\p{L}\p{M}'’-]|\.(?=\p{L}))*"
_POSTCODE_TOWN = (r"(?:,?[ \t]+(?:[A-Z]{1,2}-)?(?:\d{2}-\d{3}|\d{3} \d{2}|\d{4,5})[ \t]+\p{Lu}[\p{L}\p{M}-]*"
                  r"(?:[ -]\p{Lu}[\p{L}\p{M}-]*)?(?: [A-Z]\b)?)?")
# British (M1 3GH, WN1 2NN, SW1A 1AA) and Irish (D02 YX88) postcodes.
_UK_IE_POSTCODE = r"(?:[A-Z]{1,2}\d[A-Z\d]? \d[A-Z]{2}|[AC-FHKNPRTV-Y]\d{2} ?[AC-FHKNPRTV-Y\d]{4})"
_FR_LINK = r"(?:(?:de la|de l['’]|du|des|de|d['’]|la|le|les|l['’])\s?)"
_IT_LINK = r"(?:(?:dei|degli|delle|della|dello|del|di|de['’])\s)"
_EU_STREETS = (
    rf"\b(?:ul|al|pl|os)\.\s?(?:{_CAP}\s){{0,3}}{_CAP}\s\d{{1,4}}[a-zA-Z]?(?:/\d{{1,4}})?"
    rf"|\b\d{{1,4}}(?:\s?(?:bis|ter))?,?\s(?:rue|avenue|boulevard|bd|place|chemin|allée|impasse|quai|cours|route)"
    rf"\s{_FR_LINK}?{_CAP}(?:[\s-]{_FR_LINK}?{_CAP}){{0,3}}"
    rf"|\b(?:Via|Viale|Piazza|Piazzale|Corso|Largo|Vicolo|Strada)\s{_IT_LINK}?{_CAP}(?:\s{_IT_LINK}?{_CAP}){{0,3}}"
    rf",?\s\d{{1,4}}(?:/?[A-Za-z]\b)?"
    rf"|\b{_CAP}(?:\s{_CAP})?\s(?:Straße|Strasse|Str\.|Weg|Allee|Platz|Gasse|Ring|Damm|gate|gata|gatan|vei|veien"
    rf"|veg|vegen|vej|vägen|gade|plass|plads|torg|torget|allé)\s\d{{1,4}}\s?[a-zA-Z]?\b"
    rf"|\b\p{{Lu}}[\p{{L}}-]*(?i:{_STREET_SUFFIX}|gata|gate|gaten|veg|vegen|plass|plads|platz|allee|ring|damm|torget"
    rf"|gränd|stræde)\s\d{{1,4}}[a-z]?\b"
    rf"|\b\p{{Lu}}[\p{{L}}-]*str\.\s?\d{{1,4}}[a-z]?\b")
_LEGAL_FORMS = (r"GmbH|AG|KG|e\.V\.|S\.A\.|SAS|SARL|S\.à r\.l\.|S\.r\.l\.|Srl|S\.p\.A\.|SpA|[Ss]p\. z o\.o\."
                r"|S\.K\.A\.|ASA|A/S|ApS|Oyj?|B\.V\.|N\.V\.|s\.r\.o\.|a\.s\.|Kft\.|Zrt\.|AB|AS")
_CARE_WORDS = (r"Szpital|Klinika|Przychodnia|Klinikum|Krankenhaus|Universitätsklinikum|Hôpital|Clinique"
               r"|Centre [Hh]ospitalier|Ospedale|Policlinico|Azienda [Oo]spedaliera")
_CARE_LINK = r"(?:(?:de la|de|du|des|di|del|della|dei|im|am|an der|der|des|rechts der|św\.|im\.)\s)"
_CARE_SUFFIX = r"universitetssykehus|sykehus|sjukhus|universitetssjukhus(?:et)?|sjukhuset|sygehus|Klinikum|Klinik"
# Words after which a number is an identifier ("bleep 4417", "the account ending 4471", "ext. 315",
# "policy no. PP-7710293", "registration KX19 LMV"); a weak cue ("case", "staff", "record") only
# with "number", "no.", "ID", "reference" or "code" after it. An optional "is", "was", ":" or "#"
# may stand before the code.
_STRONG_CUES = (r"ending|ends|ending in|ending with|bleep|pager|extension|ext\.?|[Rr]ef\.?|[Aa]ccount|[Pp]olicy"
                r"|[Rr]egistration|[Pp]assport|[Cc]rew|MRN|NHS|PPS|[Ss]ort code")
_WEAK_CUES = (r"[Rr]eference|[Bb]adge|[Ss]taff|[Ee]mployee|[Pp]ayroll|[Mm]embership|[Ll]icen[cs]e|[Bb]ooking"
              r"|[Cc]laim|[Ii]nvoice|[Cc]ustomer|[Cc]lient|[Pp]atient|[Hh]ospital|[Cc]ase|[Ff]ile|[Cc]ertificate"
              r"|[Vv]ehicle|[Ss]erial|[Tt]ax|VAT|[Ii]dentity card|[Ii]dentity|[Cc]ard|[Rr]ecord|[Cc]hassis|[Ll]oan"
              r"|[Mm]ortgage|[Cc]ontract|[Oo]rder|[Tt]icket|[Pp]hone|[Tt]elephone|[Mm]ember|[Uu]nit|[Pp]rison"
              r"|[Pp]ersonal|[Ii]nsurance|[Ss]ocial security|[Bb]ank")
_CODE_LINK_WORD = r"(?:[Nn]umbers?|[Nn]os?\.|[Nn]o|ID|[Rr]ef\.?|[Rr]eference|[Cc]ode|[Mm]ark|[Pp]late)"
_CODE_CUE = (rf"(?:(?:{_STRONG_CUES})(?:\s{_CODE_LINK_WORD})?|(?:{_WEAK_CUES})\s{_CODE_LINK_WORD})"
             r"(?:\s?(?::|#)|\s(?:is|was))?")
# A code: digits, optionally with capitals and "-", "/", "." inside ("SB-0044182", "DK/2231/LM",
# "171-D-48862"), or space-separated groups of capitals and digits, one with a digit ("KX19 LMV",
# "RA 3390217", "943 476 5919").
_CODE_VALUE = (r"(?=[A-Z0-9 ./-]*\d[A-Z0-9 ./-]*\d)[A-Z]{0,4}[0-9A-Z]*(?:[-/.][0-9A-Z]+)*"
               r"(?: (?=[A-Z0-9]*\d|[A-Z]{2,4}\b)[0-9A-Z]+(?:[-/.][0-9A-Z]+)*){0,3}")
_MEASURE = (r"sq\.? ?m\.?|square met(?:re|er)s?|m²|m2|hectares?|ha|km|kilomet(?:re|er)s?|met(?:re|er)s?"
            r"|cm|mm|kg|kilograms?|grams?|g|tonnes?|tons?|litres?|liters?|per cent|percent|%")


def luhn_valid(digits: str) -> bool:
    """Luhn checksum (ISO/IEC 7812-1): doubling every second digit from the right."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def iban_valid(iban: str) -> bool:
    """ISO 13616: move the first four characters to the end, letters to 10..35, mod 97 == 1."""
    s = re.sub(r"\s", "", iban).upper()
    if not 15 <= len(s) <= 34:
        return False
    rearranged = s[4:] + s[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def _card_valid(text: str) -> bool:
    digits = re.sub(r"\D", "", text)
    return 13 <= len(digits) <= 19 and luhn_valid(digits)


def _phone_valid(text: str) -> bool:
    return 8 <= len(re.sub(r"\D", "", text)) <= 15


def _numeric_date_valid(text: str) -> bool:
    parts = [int(p) for p in re.split(r"[./-]", text)]
    if parts[0] > 31:  # year first: yyyy-mm-dd
        _, month, day = parts
    else:  # day first (European); accept month-first when day-first is impossible
        day, month, _ = parts
        if month > 12:
            day, month = month, day
    return 1 <= month <= 12 and 1 <= day <= 31


def _year_range_valid(text: str) -> bool:
    """"1997/98" is a year range only when the second part is the next year."""
    first, _, rest = re.split(r"\s?([/–-])\s?", text)
    return len(rest) == 4 and int(rest) > int(first) or len(rest) == 2 and int(rest) == (int(first) + 1) % 100


@dataclass(frozen=True)
class Recognizer:
    """One pattern family: ``name`` becomes the span's source suffix."""

    name: str
    label: str
    pattern: re.Pattern
    score: float = 0.9
    validate: Callable[[str], bool] | None = None


def _r(pattern: str, flags: int = 0) -> re.Pattern:
    return re.compile(pattern, flags | re.UNICODE)


def _u(pattern: str) -> regex.Pattern:
    """A pattern with Unicode property classes (``\\p{Lu}``: a capital in any script)."""
    return regex.compile(pattern)


RECOGNIZERS: tuple[Recognizer, ...] = (
    Recognizer("email", "CODE", _r(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)*\.[A-Za-z]{2,}\b"), 1.0),
    Recognizer("url", "CODE", _r(r"\b(?:https?://|www\.)[^\s<>\"]+[^\s<>\".,;:)]"), 0.95),
    Recognizer("iban", "CODE", _r(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b"),
               1.0, iban_valid),
    Recognizer("credit_card", "CODE", _r(r"\b\d{4}(?:[ -]?\d{4}){2}[ -]?\d{1,7}\b"), 1.0, _card_valid),
    Recognizer("phone", "CODE", _r(
        r"(?<![\w/+])(?:\+\d{1,3}[ .-]?(?:\(0\)[ .-]?)?(?:\(\d{1,5}\)|\d{1,5})(?:[ .-]?\d{2,5}){1,4}"
        r"|\(\d{2,5}\)[ .-]?\d{3,4}[ .-]?\d{3,4}"
        r"|\b0\d{2,4}[ -]\d{3,4}[ -]?\d{3,4})(?![\w/])"), 0.9, _phone_valid),
    Recognizer("ssn", "CODE", _r(r"\b\d{3}-\d{2}-\d{4}\b"), 0.85),
    Recognizer("application_no", "CODE", _r(r"\b\d{2,6}/\d{2}(?:/\d{1,4}){0,2}\b(?![./]\d)"), 0.95),
    Recognizer("numbered_ref", "CODE", _r(
        r"(?<!Law )(?<!Act )(?<!Decree )(?<!Protocol )(?<!Regulation )(?<!Rule )(?<!Article )"
        r"(?<!Directive )(?<!Ordinance )\b(?:[Nn]os?\.|[Nn]umbers?|[Rr]ef\.|[Ff]ile)\s+"
        r"(?P<v>[A-Z]{0,4}[0-9][\w./-]*[\w])"), 0.8),
    Recognizer("stated_number", "CODE", _r(
        r"\b(?:[Nn]umber|[Nn]o\.|ID|[Rr]eference) (?:is|was|:) (?P<v>[A-Z]{0,4}[-/]?\d[\w./-]*\w)"), 0.95),
    Recognizer("cue_code", "CODE", _r(
        rf"\b{_CODE_CUE}\s?(?P<v>{_CODE_VALUE})(?![\w/-]|\.\w|[ ,.]\d{{3}}\b)"), 0.9),
    Recognizer("bic", "CODE", _r(r"\b(?:BIC|SWIFT)(?: code)?:? (?P<v>[A-Z]{6}[A-Z0-9]{2}(?:[A-Z0-9]{3})?)\b"), 0.9),
    Recognizer("code_list", "CODE", _u(
        r"(?<=\b[Nn]os\.\s(?:\d[\w/.-]*(?:,\s|,?\sand\s))+)\d[\w/-]*(?:\.\d+)?(?![\w/])"), 0.85),
    Recognizer("neutral_citation", "CODE", _r(
        r"\[\d{4}\]\s(?:\d{1,3}\s)?[A-Z][A-Za-z]{1,6}(?:\s(?:Civ|Crim|Admin|Fam|Ch|QB|KB))?\s\d{1,5}"
        r"(?:\s\((?:QB|KB|Ch|Fam|Admin|Comm|TCC|Pat)\))?"), 0.9),
    Recognizer("id_code", "CODE", _r(
        r"\b(?=[A-Z0-9./-]*\d)(?=[0-9./-]*[A-Z])[A-Z0-9](?:[A-Z0-9]|[./-](?=[A-Z0-9])){4,}\b"), 0.7),
    Recognizer("judge", "PERSON", _r(r"\b[A-Z][a-z]+(?:(?:-| and )[A-Z][a-z]+)?\s(?:LJJ|LJ|QC|KC|CJ)\b"), 0.85),
    Recognizer("street_address", "LOC", _r(
        rf"(?<![Ii]n )(?<!since )(?<!of )\b\d{{1,5}}[A-Za-z]?,?\s(?:[A-Z][\w'’-]*\s){{1,3}}(?:{_STREET})(?!\w)"
        rf"|\b[A-ZÄÖÜÅØÆ][\w-]*(?:{_STREET_SUFFIX})\s\d{{1,5}}[a-z]?\b"), 0.9),
    Recognizer("postcode_address", "LOC", _r(
        rf"\b(?:\d{{1,5}}[A-Za-z]?,? )?(?:[A-Z][\w'’-]* ){{1,3}}(?:{_STREET})(?:, [A-Z][\w'’-]+(?: [A-Z][\w'’-]+)?){{0,2}}"
        rf",? {_UK_IE_POSTCODE}\b|\b[A-Z][a-z]+(?:[ -][A-Z][a-z]+)?,? {_UK_IE_POSTCODE}\b"), 0.97),
    Recognizer("eu_street_address", "LOC", _u(rf"(?:{_EU_STREETS}){_POSTCODE_TOWN}"), 0.98),
    Recognizer("postcode_town", "LOC", _u(
        r"\b(?:[A-Z]{1,2}-\d{4,5}|\d{2}-\d{3})[ \t]+\p{Lu}[\p{L}\p{M}-]*(?:[ -]\p{Lu}[\p{L}\p{M}-]*)?"), 0.85),
    Recognizer("eu_organisation", "ORG", _u(
        rf"\b{_CAP}(?:\s(?:(?:i|und|et|e|og|och|and|&)\s)?{_CAP}){{0,3}}\s(?:{_LEGAL_FORMS})(?!\w)(?!\.\w)"
        rf"|\b(?:{_CARE_WORDS})\s{_CARE_LINK}?{_CAP}(?:[\s-]{_CARE_LINK}?{_CAP}){{0,4}}"
        rf"|\b{_CAP}(?:\s{_CAP})?[\s-](?:{_CARE_SUFFIX})\b"), 0.85),
    Recognizer("date_dmy", "DATETIME", _r(rf"\b{_DAY}(?: of)? {_MONTH},? {_YEAR}\b"), 0.95),
    Recognizer("date_mdy", "DATETIME", _r(rf"\b{_MONTH} {_DAY},? {_YEAR}\b"), 0.95),
    Recognizer("date_my", "DATETIME", _r(rf"\b(?:(?:early|mid|late)[- ])?{_MONTH},? {_YEAR}\b"), 0.9),
    Recognizer("date_dm", "DATETIME", _r(rf"\b{_DAY} (?:of )?{_MONTH}(?! \d)\b|\b{_MONTH} {_DAY}\b(?![,.]?\d)"),
               0.8),
    Recognizer("date_list", "DATETIME", _r(
        rf"\b{_DAY}(?:(?:,\s|\s(?:and|or|to)\s|\s?[-–]\s?){_DAY})*(?:,\s|,?\s(?:and|or|to)\s|\s?[-–]\s?){_DAY}"
        rf"\s(?:of\s)?{_MONTH}(?:,?\s{_YEAR})?\b"), 0.95),
    Recognizer("date_numeric", "DATETIME", _r(
        r"\b(?:(?:0?[1-9]|[12]\d|3[01])([./-])(?:0?[1-9]|1[0-2])\1(?:1[6-9]|20)?\d\d"
        r"|(?:1[6-9]|20)\d\d-(?:0?[1-9]|1[0-2])-(?:0?[1-9]|[12]\d|3[01]))\b(?![./-]\d)"),
        0.96, _numeric_date_valid),
    Recognizer("year_range", "DATETIME", _r(rf"\b{_YEAR}(?:/\d\d|\s?[-–]\s?{_YEAR})\b(?!/)"), 0.97,
               _year_range_valid),
    Recognizer("decade", "DATETIME", _r(r"\b(?:1[6-9]|20)\d0s\b"), 0.85),
    Recognizer("year", "DATETIME", _r(
        rf"(?<![\d/.,-])(?<!no\. )(?<!No\. )(?<!nos\. )\b{_YEAR}\b(?![\d/]|\.\d|,\d)"), 0.7),
    Recognizer("time", "DATETIME", _r(
        r"(?<![\d.:])\b(?:[01]?\d|2[0-3])[.:][0-5]\d(?![.:]?\d)(?:\s?(?:a\.m\.|p\.m\.|am|pm|hrs|h)(?!\w))?"
        r"|\b(?:1[0-2]|0?[1-9])\s?(?:a\.m\.|p\.m\.|am\b|pm\b)"), 0.75),
    Recognizer("duration", "DATETIME", _r(
        rf"\b{_COUNT}(?:[- ](?:and a half|{_UNITS}))?(?:,? and {_COUNT})?[- ]{_UNITS}"
        rf"(?:(?:,| and) {_COUNT} {_UNITS})*\b", re.IGNORECASE), 0.75),
    Recognizer("amount_prefix", "QUANTITY", _r(
        rf"(?:\b(?:{_CURRENCY_CODES})|[£$€¥₺])\s?(?:{_NUM})(?:\s?(?:million|billion|thousand))?"), 0.9),
    Recognizer("amount_suffix", "QUANTITY", _r(
        rf"\b(?:{_NUM})(?:\s(?:million|billion|thousand))?\s(?:(?:new )?(?:Swedish|Danish|Norwegian|Polish"
        rf"|Turkish|Finnish|Swiss|French|Belgian|Austrian|Irish|Cypriot|Maltese|US|American|German"
        rf"|Slovak|Czech|Hungarian|Romanian|Bulgarian|Ukrainian|Russian) )?(?:{_CURRENCY_WORDS})\b"
        rf"(?:\s[(\[](?:{_CURRENCY_CODES})[)\]])?|\b(?:{_NUM})\s?(?:{_CURRENCY_CODES})\b"), 0.9),
    Recognizer("measure", "QUANTITY", _r(rf"\b(?:{_NUM})\s?(?:{_MEASURE})(?![\w²])"), 0.8),
    Recognizer("age", "DEM", _r(
        rf"\b(?:aged|age of|at the age of|at age|age)\s{_COUNT}(?:\s(?:years|months)(?: old| of age)?)?\b"
        rf"|\b{_COUNT}[-‐‑ ](?:year|month)s?[-‐‑ ]old\b|\b{_COUNT}\syears\sof\sage\b", re.IGNORECASE), 0.9),
)


class PatternTagger:
    """Tags e-mails, URLs, phones, IBANs, BICs, cards, case/application numbers, codes after cue
    words, ID codes, neutral citations, judges ("Auld LJ"), street addresses (English, British and
    Irish postcodes, European), European organisations, dates and lists of days, times,
    durations, amounts, measurements and ages with :data:`RECOGNIZERS`."""

    name = "patterns"

    def __init__(self, recognizers: tuple[Recognizer, ...] = RECOGNIZERS) -> None:
        self.recognizers = recognizers

    def candidates(self, text: str) -> list[Span]:
        """Every validated match, before overlap resolution."""
        spans: list[Span] = []
        for rec in self.recognizers:
            for m in rec.pattern.finditer(text):
                group = "v" if "v" in rec.pattern.groupindex else 0
                start, end = m.span(group)
                if start == end or (rec.validate is not None and not rec.validate(m.group(group))):
                    continue
                spans.append(Span(start, end, rec.label, rec.score, f"patterns:{rec.name}"))
        return spans

    def spans(self, text: str) -> list[Span]:
        """The resolved matches with TAB's labels (what the CRF reads as features)."""
        return resolve_overlaps(self.candidates(text), text)

    def tag(self, text: str) -> list[Span]:
        """The resolved matches, DATETIME and DEM split into finer labels (taggers/subtypes.py)."""
        return refine_labels(self.spans(text), text)
