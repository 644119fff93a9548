"""Whole entities: a span, once found, is widened to cover the whole mention.

A tagger that finds part of an entity protects that part and releases the rest ("Insurance" of
"Bexmoor Insurance plc", "F" of "F.A. Lindqvist"), so every found span is widened over the
untagged text around it on its line that belongs to the same mention, by its label:

- every label: an abbreviation's full stop ("Inc" + ".", "F" + "."), the initials written on after
  an initial ("F." + "A." of "F.A."), the other half of a hyphenated number ("forty" + "-five"),
  the closing marks of a bracket or quote the span opens, and spans of one label separated only
  by ``.``, ``-``, ``'`` or ``/`` are joined ("Dipl" + ".-" + "Ing"), as are a title and a
  PERSON ("Mr" + " and " + "Mrs Robins");
- PERSON: titles ("Mr", "Dr", "Maître", "Mr and Mrs"), initials ("F.A.", "J.-P."; not a list's
  letter before a title), name particles ("van der", "de la", "Mac Giolla", "Ní", "Ó", "bin") and
  the capitalised words they lead to, hyphen and apostrophe parts ("O'" + "Brien", "Dubois" +
  "-Martel"), "LJ" / "QC" after it, and a capitalised word just before it that the document
  never writes in lower case and that opens no sentence ("Tùng" of "Tùng Bùi"), and the other
  letters of a list of one-letter names ("H, N and A", "B and R") that a one-letter span is part
  of (not "I");
- ORG: a company's legal form or firm word after it ("plc", "Ltd", "LLP", "GmbH", "S.A.S.", "Inc.",
  "& Partners", "Solicitors", "Associates") and, when it has one, the capitalised words before it
  ("Bexmoor" of "Bexmoor Insurance plc"); an alias in quotes or a short gloss in brackets after
  it ("Geneve A/S (“Geneve”)"), as for MISC and DEM;
- LOC: for an address (a span with a digit or a street word), the house or flat number before it
  and the town, district ("Dublin 2", "Co. Cork") and postcode (British, Irish, Dutch, Portuguese,
  Polish, four or five digits) after it;
- QUANTITY: the currency before or after the amount ("EUR", "€", "euros");
- DATETIME: dates without a year listed before one with it, joined into one series ("14 May and
  16 August 1999", "October and November 1992", "17 May, 3 June and 10 September 1999": the year
  is every date's); the weekday ("Saturday 18 March 2017"), a part of a period ("early", "the
  end of", "autumn of", "27th day of") or a first count ("two to" four years) before it, and
  the apostrophe after a plural ("six months’").

A span only grows over characters no other span holds, so the result stays disjoint and no
found character is dropped or relabelled; adjacent spans of the label a span grew into merge.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import regex

from tokendp.text.spans import Span
from tokendp.text.taggers.resolve import merge_same_label

# "[^\S\n]" throughout: white space other than a line break; a mention does not run on to the next line.
_CAP = r"\p{Lu}[\p{Ll}\p{Lu}\p{M}]*(?:['’]\p{Lu}[\p{Ll}\p{M}]+)?"
_TITLES = (r"Mr|Mrs|Ms|Miss|Mx|Messrs|Dr|Prof|Professor|Sir|Dame|Lord|Lady|Judge|Justice|Maître|Me|Mme|Mlle"
           r"|Herr|Frau|Sergeant|Sgt|Constable|Inspector|Detective|Garda|Father|Fr|Rev|Reverend|Dipl\.-Ing"
           r"|Captain|Capt|Colonel|Major|Lieutenant|Senator|Councillor|Cllr|Nurse")
# Particles of surnames, written before a capitalised part ("van der Berg", "Mac Giolla", "Ní
# Bhriain", "al-Rashid"); Irish "an" leads to an eclipsed or prefixed word ("Mac an tSaoir").
_PARTICLE = (r"(?:van der|van den|van de|van|von der|von|vom|zu|de la|de las|de los|de l['’]|del|della|dello"
             r"|de|da|das|do|dos|du|di|le|la|ter|ten|Mac Giolla|Nic Giolla|Mac|Mc|Nic|Ní|Ó|Ua|Uí|Mhic|Bean"
             r"|bin|ibn|bint|ben|al|el|Al|El|Abu|Abd|Van|Von|De|Da|Di|Du|Le|La|Dell['’]|D['’])")
_IRISH_PREFIXED = r"(?:an[^\S\n])?(?:[bdgmnt]|bh|h|n-|t-)?\p{Lu}[\p{Ll}\p{M}]+"
_INITIALS = r"(?:\p{Lu}\.[^\S\n]?-?[^\S\n]?){1,4}"
_FIRM = (r"plc|PLC|p\.l\.c\.|Ltd\.?|Limited|LLP|LLC|L\.L\.C\.|Inc\.?|Incorporated|Corp\.?|Corporation"
         r"|GmbH(?: & Co\.? KG)?|AG|KG|S\.A\.S\.?|SAS|S\.A\.R\.L\.?|SARL|S\.à r\.l\.|S\.A\.?|S\.L\.?|S\.r\.l\.?|Srl"
         r"|S\.p\.A\.?|SpA|N\.V\.?|B\.V\.?|A/S|ApS|AB|ASA|Oyj?|[Ss]p\. z o\.o\.|s\.r\.o\.|a\.s\.|d\.o\.o\.|Kft\.|Zrt\."
         r"|Pty(?: Ltd\.?)?|Solicitors|Associates|Associés|Partners|Partnership|Co\."
         r"|(?:&|and) (?:Co\.?|Company|Partners|Sons|Associates|Associés|Partner)")
_NOT_NAME_WORD = (r"(?:The|A|An|In|On|At|By|For|From|With|To|Of|And|Or|But|Our|Your|His|Her|Their|Its|This|That"
                  r"|These|Those|Dear|Re|To|Per|Via|Mr|Mrs|Ms|Dr|Insured|Employer|Employee|Client|Contact)\b")
_WEEKDAY = (r"(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday|Mon|Tue|Tues|Wed|Thu|Thur|Thurs"
            r"|Fri|Sat|Sun)\.?,?[^\S\n]")
_CURRENCY = (r"EUR|GBP|USD|SEK|DKK|NOK|CHF|PLN|TRY|RUB|UAH|CZK|HUF|RON|BGN|HRK|ISK|JPY|CAD|AUD|FRF|DEM|ITL"
             r"|BEF|NLG|ESP|PTE|IEP|ATS|FIM|GRD|£|\$|€|¥|₺|zł")
_CURRENCY_WORD = (r"euros?|Euros?|pounds?(?: sterling)?|dollars?|kronor|kroner|krona|krone|zlotys?|zł|francs?"
                  r"|roubles?|rubles?|lira|liras|lire|marks?|forints?|korunas?|hryvnias?|lei|levs?|kunas?|cents?"
                  r"|pence|p")
_POSTCODE = (r"[A-Z]{1,2}\d[A-Z\d]?[^\S\n]?\d[A-Z]{2}"  # British: M1 3GH, WN1 2NN
             r"|[AC-FHKNPRTV-Y]\d{2}[^\S\n]?[AC-FHKNPRTV-Y\d]{4}"  # Irish Eircode: D02 YX88
             r"|\d{4}[^\S\n]?[A-Z]{2}"  # Dutch: 1016 BR
             r"|\d{4}-\d{3}|\d{2}-\d{3}"  # Portuguese, Polish
             r"|(?:[A-Z]{1,2}-)?\d{4,5}")
_TOWN_WORD = r"\p{Lu}[\p{Ll}\p{M}]+(?:['’-]\p{Lu}?[\p{Ll}\p{M}]+)*"
_TOWN = rf"(?:{_TOWN_WORD}(?:(?:[^\S\n]|-)(?:(?:am|an|der|de|la|le|sur|upon|on|en)[^\S\n])?{_TOWN_WORD}){{0,2}})"
_DISTRICT = r"(?:[^\S\n]\d{1,2}[A-Z]?\b)"  # Dublin 2, Dublin 6W
_COUNTY = r"(?:,?[^\S\n](?:Co\.|County)[^\S\n]\p{Lu}\p{Ll}+)"

_NUMBER = (r"(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty"
           r"|fifty|sixty|a few|several)")
_TIME_MODIFIER = (r"(?:[Ee]arly|[Mm]id|[Ll]ate|(?:[Tt]he[^\S\n])?(?:end|beginning|start|middle|course)[^\S\n]of"
                  r"|(?:morning|afternoon|evening|night|spring|summer|autumn|winter)[^\S\n]of"
                  r"|\d{1,2}(?:st|nd|rd|th)[^\S\n]day[^\S\n]of)(?:[^\S\n]|-)")
# A parenthetical after a name: an alias in quotes ("Geneve A/S (“Geneve”)", "(“the Government”)"),
# or a gloss in words ("Consumer Ombudsman (Forbrukerombudet)").
_ALIAS = (r"[^\S\n]\((?:hereinafter[^\S\n])?[“\"‘]\p{Lu}[^”\"’\n()]{0,40}[”\"’]\)"
          r"|[^\S\n]\(\p{Lu}[\p{Ll}\p{M}]+(?:[^\S\n]\p{L}[\p{Ll}\p{M}]+)?\)")

# Text to the LEFT of a span, as a pattern matched against the text that ends where the span starts.
_LEFT: dict[str, tuple[str, ...]] = {
    "PERSON": (rf"\b(?:{_TITLES})\.?[^\S\n](?:and[^\S\n](?:{_TITLES})\.?[^\S\n])?",
               rf"(?<![\w.]){_INITIALS}",
               rf"\b{_PARTICLE}(?:[^\S\n]|-|(?<=['’]))", r"\b\p{L}[\p{L}\p{M}]*[-'’]"),
    "ORG": (r"\b\p{L}[\p{L}\p{M}]*-",),
    "LOC": (r"\b(?:(?:Flat|Apartment|Apt\.|Unit|Suite|Room)[^\S\n]\d{1,4}[A-Za-z]?,[^\S\n])?\d{1,5}[A-Za-z]?,?[^\S\n]",),
    "QUANTITY": (rf"(?:{_CURRENCY})[^\S\n]?",),
    "DATETIME": (rf"\b{_WEEKDAY}", rf"\b{_TIME_MODIFIER}", rf"\b{_NUMBER}[^\S\n](?:to|or)[^\S\n]"),
}
# Text to the RIGHT of a span, matched where the span ends.
_RIGHT: dict[str, tuple[str, ...]] = {
    "PERSON": (r"[-'’]\p{Lu}[\p{L}\p{M}]*", rf"(?:[^\S\n]{_PARTICLE})+(?:[^\S\n]|-|(?<=['’])){_IRISH_PREFIXED}",
               r"[^\S\n](?:LJJ|LJ|QC|KC|CJ|J)\b"),
    "ORG": (rf",?[^\S\n](?:{_FIRM})(?!\w)(?:(?<=\.)|(?!\.\w))", r"-\p{Lu}[\p{L}\p{M}]*",
            rf"(?:,?[^\S\n]{_CAP}){{0,3}}[^\S\n](?:&|and)[^\S\n](?:Partners|Associates|Associés|Sons|Co\.?|Company)(?!\w)",
            _ALIAS),
    "MISC": (_ALIAS,),
    "DEM": (_ALIAS,),
    "DATETIME": (r"(?<=s)['’](?!\w)",),
    "LOC": (rf",?[^\S\n]{_TOWN}(?:{_DISTRICT}|{_COUNTY})?(?:,?[^\S\n](?:{_POSTCODE})\b)?"
            rf"|,?[^\S\n](?:{_POSTCODE})\b(?:[^\S\n]{_TOWN})?",),
    "QUANTITY": (rf"[^\S\n]?(?:{_CURRENCY_WORD}|{_CURRENCY})(?!\w)",),
}
# Capitalised words before an organisation that ends in a legal form or firm word.
_FIRM_END = regex.compile(rf"(?:^|[^\S\n])(?:{_FIRM})\Z")
_FIRM_NAME_LEFT = regex.compile(rf"(?:(?<!\p{{L}})(?!{_NOT_NAME_WORD}){_CAP}(?:,|[^\S\n]&|[^\S\n]and)?[^\S\n]){{1,4}}\Z")
_STREET_WORD = regex.compile(r"(?i:road|rd|street|st|avenue|ave|lane|drive|way|close|crescent|terrace|gardens"
                             r"|square|place|row|walk|mews|parade|hill|quay|straße|strasse|gate|gatan|vej|gade"
                             r"|straat|gracht|ulica|ul|calle|rua|rue|via|piazza|corso)\b")
_ABBREVIATION = regex.compile(r"(?:(?<![\p{L}\p{M}])\p{Lu}|Inc|Ltd|Co|Corp|Bros|Jr|Sr|St|No|Nos|Mr|Mrs|Ms|Dr|Prof|Ing"
                              r"|\p{L}\.\p{L})\Z")
_GLUE = regex.compile(r"[.'’/-]{1,3}\Z")
_LOWER_WORD = regex.compile(r"(?<![\p{L}\p{M}])\p{Ll}[\p{Ll}\p{M}]+")
_WORD_BEFORE = regex.compile(r"(?<![\p{L}\p{M}'’-])(\p{Lu}[\p{Ll}\p{M}]+)[^\S\n]\Z")
# Capitalised words that open sentences or headings, never a given name in TAB's or the letters' text.
_OPENERS = frozenset(
    "the a an this that these those then when while after before since during yesterday today tomorrow later "
    "earlier meanwhile however moreover also and but or so if as at on in by for from with to of dear re "
    "according although though thereafter subsequently accordingly finally first second third next last "
    "both neither either each every all some many most several other such no not only one two three "
    "his her their its our my your mr mrs ms dr judge lord lady president patient name signed present "
    "witness applicant applicants respondent government court counsel agent".split())
_TITLE_START = regex.compile(rf"(?:{_TITLES})\b")
_TITLE_AND = regex.compile(rf"(?:{_TITLES})\.?[^\S\n](?:and|&)[^\S\n]")
# A span that opens a bracket or quote it does not close ("(“Geneve") takes the closing marks after it.
_OPEN_CLOSE = (("(", ")"), ("“", "”"), ("[", "]"))
# Initials written on after an initial without a space: "F." + "A." of "F.A.", "B." + "Ӧ.".
_INITIAL_END = regex.compile(r"(?<![\p{L}\p{M}])\p{Lu}\.?\Z")
_MORE_INITIALS = regex.compile(r"\.?(?:\p{Lu}\.)*\p{Lu}(?![\p{L}\p{M}])")
# One-letter names in a list ("A, B, H, N and R"): the letters beside a one-letter PERSON span;
# not the pronoun "I" ("X and I"), nor a letter after a capitalised word ("Annex A, B").
_LETTER_NAME = regex.compile(r"(?<![\p{L}\p{M}\d.'’])\p{Lu}(?![\p{L}\p{M}\d.'’])")
_LIST_WORD = r"(?:,[^\S\n]|,?[^\S\n](?:and|or|&)[^\S\n])"
_LETTER_LEFT = regex.compile(rf"(?<![\p{{L}}\p{{M}}\d.'’])(?<!\p{{Lu}}[\p{{Ll}}\p{{M}}]+[^\S\n])(?!I\b)\p{{Lu}}"
                             rf"{_LIST_WORD}\Z")
_LETTER_RIGHT = regex.compile(rf"{_LIST_WORD}(?!I\b)\p{{Lu}}(?![\p{{L}}\p{{M}}\d.'’])")
# A date series: dates without a year ("14 May", "October"), then one with it, joined by list words.
_SERIES_GAP = regex.compile(r"(?:,[^\S\n]|,?[^\S\n](?:and|or|to|until)[^\S\n]|[^\S\n]?[-–][^\S\n]?)")
_MONTH_NAME = (r"(?:January|February|March|April|May|June|July|August|September|October|November|December"
               r"|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\.?")
_DAY_OF = r"\d{1,2}(?:st|nd|rd|th)?[^\S\n](?:of[^\S\n])?"
_YEARLESS = regex.compile(rf"(?:{_DAY_OF}{_MONTH_NAME}|{_MONTH_NAME}(?:[^\S\n]\d{{1,2}})?)")
_DATED = regex.compile(rf"(?:(?:{_DAY_OF})?{_MONTH_NAME}|{_MONTH_NAME}[^\S\n]\d{{1,2}},?)[^\S\n](?:1[6-9]|20)\d\d")
# A hyphenated number ("forty-five") that a span starts or ends inside.
_HYPHEN_NUMBER = regex.compile(r"(?<![\p{L}\p{M}])(?i:twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)-"
                               r"(?i:one|two|three|four|five|six|seven|eight|nine)(?![\p{L}\p{M}])")
_LEFT_RE = {label: tuple(regex.compile(rf"(?:{p})\Z") for p in ps) for label, ps in _LEFT.items()}
_RIGHT_RE = {label: tuple(regex.compile(p) for p in ps) for label, ps in _RIGHT.items()}
_WINDOW = 80  # characters looked at on each side


def _is_address(span: Span, text: str) -> bool:
    body = text[span.start:span.end]
    return any(c.isdigit() for c in body) or bool(_STREET_WORD.search(body))


def _given_name_before(span: Span, text: str, start: int, free_from: int, lower_case: frozenset[str]) -> int:
    """Where a PERSON span starts once a capitalised word just before it on its line is taken in:
    a word the document never writes in lower case and that is not a common sentence opener
    ("Tùng" of "today. Tùng Bùi came"; not "Later", "The", "Yesterday"); else ``start``."""
    if span.label != "PERSON" or _TITLE_START.match(text, span.start, span.end):
        return start
    m = _WORD_BEFORE.search(text[max(free_from, start - _WINDOW):start])
    if m is None or m.group(1).lower() in lower_case or m.group(1).lower() in _OPENERS:
        return start
    return start - len(m.group(0))


def _pieces(label: str, text: str, start: int, end: int, free_from: int, free_to: int) -> tuple[int, int]:
    """``[start, end)`` widened by the rules that read the span itself: initials written on after
    an initial, a hyphenated number it starts or ends inside, and (PERSON) the letters beside a
    one-letter name in a list."""
    if _INITIAL_END.search(text, start, end) and (m := _MORE_INITIALS.match(text, end, free_to)):
        end = m.end()
    for m in _HYPHEN_NUMBER.finditer(text, max(free_from, start - 8), min(free_to, end + 8)):
        if m.start() < start < m.end():
            start = m.start()
        if m.start() < end < m.end():
            end = m.end()
    if label == "PERSON":
        if _LETTER_NAME.fullmatch(text, start, start + 1) and (
                m := _LETTER_LEFT.search(text, max(free_from, start - 8), start)):
            start = m.start()
        if _LETTER_NAME.fullmatch(text, end - 1, end) and (m := _LETTER_RIGHT.match(text, end, free_to)):
            end = m.end()
    return start, end


def _grow(span: Span, text: str, free_from: int, free_to: int, lower_case: frozenset[str]) -> Span:
    """``span`` widened by its label's rules, within the untagged text ``[free_from, free_to)``;
    ``lower_case``: the words the text writes in lower case."""
    start, end = span.start, span.end
    left = _LEFT_RE.get(span.label, ())
    right = _RIGHT_RE.get(span.label, ())
    if span.label == "LOC" and not _is_address(span, text):
        left = right = ()
    if span.label == "PERSON" and _TITLE_START.match(text, start, end):
        left = left[:1]  # "A. Mr Runkee": a list's letter before a title is no initial
    changed = True
    while changed:
        changed = False
        window = text[max(free_from, start - _WINDOW):start]
        for pattern in left:
            m = pattern.search(window)
            if m and m.start() < len(window) and window[m.start():].strip():
                start -= len(window) - m.start()
                changed = True
                break
        for pattern in right:
            m = pattern.match(text, end, min(free_to, end + _WINDOW))
            if m and m.end() > end:
                end = m.end()
                changed = True
                break
        pieces = _pieces(span.label, text, start, end, free_from, free_to)
        changed = changed or pieces != (start, end)
        start, end = pieces
    start = _given_name_before(span, text, start, free_from, lower_case)
    if span.label == "ORG" and _FIRM_END.search(text, span.start, end):
        window = text[max(free_from, start - _WINDOW):start]
        m = _FIRM_NAME_LEFT.search(window)
        if m and m.group().strip():
            start -= len(window) - m.start()
    if end < free_to and text[end] == "." and _ABBREVIATION.search(text, start, end):
        end += 1
    body = text[start:end]
    for opening, closing in reversed(_OPEN_CLOSE):  # inner quote first: (“Geneve”)
        if end < free_to and text[end] == closing and body.count(opening) > body.count(closing):
            end += 1
            body += closing
    return replace(span, start=start, end=end)


def whole_entities(spans: Sequence[Span], text: str) -> list[Span]:
    """Disjoint, sorted ``spans`` of ``text`` (TAB labels), each widened over the rest of its
    mention (module docstring); the result is disjoint and sorted and covers every character the
    input covered, with the same labels."""
    ordered = sorted(spans, key=lambda s: s.start)
    lower_case = frozenset(_LOWER_WORD.findall(text))
    grown: list[Span] = []
    for i, span in enumerate(ordered):
        free_from = grown[-1].end if grown else 0
        free_to = ordered[i + 1].start if i + 1 < len(ordered) else len(text)
        grown.append(_grow(span, text, free_from, free_to, lower_case))
    return _join(_date_series(merge_same_label(grown), text), text)


def _date_series(spans: list[Span], text: str) -> list[Span]:
    """Runs of DATETIME spans, each without a year, then one with it, separated by list words
    only ("14 May" + " and " + "16 August 1999"), joined into one span."""
    out: list[Span] = []
    i = 0
    while i < len(spans):
        j = i
        while (j + 1 < len(spans) and spans[j].label == spans[j + 1].label == "DATETIME"
               and _YEARLESS.fullmatch(text, spans[j].start, spans[j].end)
               and _SERIES_GAP.fullmatch(text, spans[j].end, spans[j + 1].start)):
            j += 1
        if j > i and _DATED.fullmatch(text, spans[j].start, spans[j].end):
            out.append(replace(spans[i], end=spans[j].end, score=max(s.score for s in spans[i:j + 1])))
            i = j + 1
        else:
            out.append(spans[i])
            i += 1
    return out


def _join(spans: list[Span], text: str) -> list[Span]:
    """Spans of one label separated only by ``.``, ``-``, ``'`` or ``/`` become one, and so do a
    title and the PERSON after it ("Mr" + " and " + "Mrs Robins")."""
    joined: list[Span] = []
    for span in spans:
        prev = joined[-1] if joined else None
        if (prev is not None and prev.label == span.label and span.start > prev.end
                and (_GLUE.match(text, prev.end, span.start)
                     or span.label == "PERSON" and _TITLE_AND.fullmatch(text, prev.start, span.start))):
            joined[-1] = replace(prev, end=span.end, score=max(prev.score, span.score))
        else:
            joined.append(span)
    return joined
