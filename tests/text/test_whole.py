"""Whole entities: each rule of taggers/whole.py widens a found span over the rest of its
mention, and stops where the mention stops."""

import pytest

from tokendp.text.spans import Span
from tokendp.text.taggers.whole import whole_entities


def _grow(text, *found):
    """``found``: (word, label) pairs, each the first occurrence of ``word`` in ``text``."""
    spans = [Span(text.index(w), text.index(w) + len(w), label) for w, label in found]
    return [(text[s.start:s.end], s.label) for s in whole_entities(spans, text)]


@pytest.mark.parametrize("text,found,whole", [
    # companies: the legal form or firm word, then the words before it
    ("22. Bexmoor Insurance plc was", ("Insurance", "ORG"), "Bexmoor Insurance plc"),
    ("employer, Kestrel Mutual Assurance plc, dismissed", ("Mutual Assurance", "ORG"),
     "Kestrel Mutual Assurance plc"),
    ("by Northgate Data Systems Inc. in", ("Northgate Data Systems", "ORG"), "Northgate Data Systems Inc."),
    ("of Quill, Barrow & Partners, inspected", ("Quill", "ORG"), "Quill, Barrow & Partners"),
    ("by Valmont Conseil S.A.S. in", ("Valmont Conseil", "ORG"), "Valmont Conseil S.A.S."),
    ("for Hollis Grant LLP, who", ("Hollis Grant", "ORG"), "Hollis Grant LLP"),
    ("named Geneve A/S (“Geneve”). It", ("Geneve A/S", "ORG"), "Geneve A/S (“Geneve”)"),
    # names: titles, initials, particles, hyphens, apostrophes
    ("by Ms F.A. Lindqvist.", ("Lindqvist", "PERSON"), "Ms F.A. Lindqvist"),
    ("Mr P.J. O'Brien, the", ("Brien", "PERSON"), "Mr P.J. O'Brien"),
    ("Mr Declan Mac Giolla Phádraig, is", ("Mr Declan", "PERSON"), "Mr Declan Mac Giolla Phádraig"),
    ("Mr Ciarán Mac an tSaoir was", ("Mr Ciarán", "PERSON"), "Mr Ciarán Mac an tSaoir"),
    ("Jean-François Dubois-Martel wrote", ("Jean-François Dubois", "PERSON"), "Jean-François Dubois-Martel"),
    ("by Mr J.M. Álvarez de Toledo, a", ("Mr J.M. Álvarez", "PERSON"), "Mr J.M. Álvarez de Toledo"),
    ("Then Auld LJ said", ("Auld", "PERSON"), "Auld LJ"),
    ("statements made by F.A., which", ("F.", "PERSON"), "F.A."),                 # initials written on
    ("statements of B.Ӧ. and", ("B", "ORG"), "B.Ӧ."),                             # any label, any script
    ("co-accused, A, B, H, N and R) were", ("B", "PERSON"), "A, B, H, N and R"),  # one-letter names
    ("against [H, N and A] [had", ("H, N", "PERSON"), "H, N and A"),
    ("seen today. Tùng Bùi came with his son", ("Bùi", "PERSON"), "Tùng Bùi"),
    # addresses: number, street, town, district, postcode
    ("lives at 27 Ballybough Road, Dublin 3.", ("Ballybough Road", "LOC"), "27 Ballybough Road, Dublin 3"),
    ("at 14 Harcourt Terrace, Dublin 2, D02 YX88\n", ("14 Harcourt Terrace", "LOC"),
     "14 Harcourt Terrace, Dublin 2, D02 YX88"),
    ("at Herengracht 182, 1016 BR Amsterdam destroyed", ("Herengracht 182", "LOC"),
     "Herengracht 182, 1016 BR Amsterdam"),
    # amounts and dates
    ("paid 3,000 euros in", ("3,000", "QUANTITY"), "3,000 euros"),
    ("paid EUR 12,750 in", ("12,750", "QUANTITY"), "EUR 12,750"),
    ("on Saturday 18 March 2017 at", ("18 March 2017", "DATETIME"), "Saturday 18 March 2017"),
    ("until the end of September 1994 the", ("September 1994", "DATETIME"), "the end of September 1994"),
    ("sentenced to six months’ imprisonment", ("six months", "DATETIME"), "six months’"),
    ("from two to four years.", ("four years", "DATETIME"), "two to four years"),
    ("scheduled forty-five hearings", ("-five", "QUANTITY"), "forty-five"),        # a hyphenated number
    ("a total of fifty-nine, committed", ("fifty-", "QUANTITY"), "fifty-nine"),
    ("aged forty-four", ("aged forty", "DEM"), "aged forty-four"),
])
def test_a_found_part_grows_to_the_whole_mention(text, found, whole):
    assert (whole, found[1]) in _grow(text, found)


@pytest.mark.parametrize("text,found,kept", [
    ("The Kestrel Mutual Assurance plc", ("Mutual Assurance plc", "ORG"), "Kestrel Mutual Assurance plc"),
    ("in London, Mr Smith said", ("London", "LOC"), "London"),                # a town is no address
    ("at 27 Alder Road,\nLeeds", ("27 Alder Road", "LOC"), "27 Alder Road"),   # not across a line break
    ("A. Mr Runkee said", ("Mr Runkee", "PERSON"), "Mr Runkee"),             # a list letter is no initial
    ("the Insurance division", ("Insurance", "ORG"), "Insurance"),           # no legal form: no widening left
    ("paid 3,000 to them", ("3,000", "QUANTITY"), "3,000"),
    ("the applicant was British", ("British", "DEM"), "British"),
    ("Later Bùi came with his son", ("Bùi", "PERSON"), "Bùi"),                 # a sentence opener
    ("Will Bùi come? He will.", ("Bùi", "PERSON"), "Bùi"),                   # "will" is a word here
    ("Yesterday Mr Bùi came", ("Mr Bùi", "PERSON"), "Mr Bùi"),               # a title starts the name
    ("by Mr X. A new hearing", ("Mr X", "PERSON"), "Mr X."),                  # a space: no more initials
    ("in Annex A, B was", ("B", "PERSON"), "B"),                              # "Annex A" is no list of names
    ("A, B and C signed", ("B", "ORG"), "B"),                                 # letters join a PERSON only
    ("witness X and I went", ("X", "PERSON"), "X"),                           # "I" is a pronoun
    ("forty-five of them", ("forty-five", "QUANTITY"), "forty-five"),
])
def test_growth_stops_where_the_mention_stops(text, found, kept):
    assert (kept, found[1]) in _grow(text, found)


def test_parts_of_one_label_joined_across_punctuation_and_a_title_pair():
    assert _grow("Dipl.-Ing. H.-J. Reinhardt, x", ("Dipl", "PERSON"), ("Ing", "PERSON")) == [("Dipl.-Ing.", "PERSON")]
    assert _grow("The applicants, Mr and Mrs Robins, born", ("Mr", "PERSON"), ("Mrs Robins", "PERSON")) == [
        ("Mr and Mrs Robins", "PERSON")]


@pytest.mark.parametrize("text,dates,whole", [
    ("On 14 May and 16 August 1999, the", ("14 May", "16 August 1999"), "14 May and 16 August 1999"),
    ("in October and November 1992, the", ("October", "November 1992"), "October and November 1992"),
    ("On 17 May, 3 June and 10 September 1999 the", ("17 May", "3 June", "10 September 1999"),
     "17 May, 3 June and 10 September 1999"),
    ("from 25 April to 9 June 1997.", ("25 April", "9 June 1997"), "25 April to 9 June 1997"),
])
def test_dates_without_a_year_join_the_dated_one_after_them(text, dates, whole):
    assert _grow(text, *((d, "DATETIME") for d in dates)) == [(whole, "DATETIME")]


@pytest.mark.parametrize("text,dates", [
    ("on 3 May 1999 and 16 August 1999 the", ("3 May 1999", "16 August 1999")),   # both have a year
    ("on 14 May and 16 August the", ("14 May", "16 August")),                       # neither has one
    ("on 14 May, when 16 August 1999", ("14 May", "16 August 1999")),                # not a list
])
def test_dates_that_are_no_series_stay_apart(text, dates):
    assert _grow(text, *((d, "DATETIME") for d in dates)) == [(d, "DATETIME") for d in dates]


def test_growth_never_takes_another_span_or_drops_a_character():
    text = "Mr Smith of Harland & Pike Logistics Ltd on 5 May 2001"
    found = [Span(text.index(w), text.index(w) + len(w), label) for w, label in
             (("Mr Smith", "PERSON"), ("Pike Logistics Ltd", "ORG"), ("5 May 2001", "DATETIME"))]
    out = whole_entities(found, text)
    assert all(a.end <= b.start for a, b in zip(out, out[1:]))
    assert all(any(o.start <= f.start and f.end <= o.end and o.label == f.label for o in out) for f in found)
    assert [text[s.start:s.end] for s in out] == ["Mr Smith", "Harland & Pike Logistics Ltd", "5 May 2001"]
