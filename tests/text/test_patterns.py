"""Each pattern family: positives are tagged with the right label, near misses are not."""

import pytest

from tokendp.text.taggers.patterns import PatternTagger, iban_valid, luhn_valid

TAGGER = PatternTagger()


def _tagged(text):
    return {(text[s.start:s.end], s.label) for s in TAGGER.tag(text)}


@pytest.mark.parametrize("text,expected,label", [
    ("Write to jane.doe+x@example.co.uk today.", "jane.doe+x@example.co.uk", "CODE"),
    ("See https://example.org/a?b=1.", "https://example.org/a?b=1", "CODE"),
    ("Call +44 20 7946 0958 now.", "+44 20 7946 0958", "CODE"),
    ("Call +1 (415) 555-2671.", "+1 (415) 555-2671", "CODE"),
    ("Call (020) 7946 0958.", "(020) 7946 0958", "CODE"),
    ("Call 030 1234 5678.", "030 1234 5678", "CODE"),
    ("IBAN GB82 WEST 1234 5698 7654 32 here", "GB82 WEST 1234 5698 7654 32", "CODE"),
    ("IBAN DE89370400440532013000.", "DE89370400440532013000", "CODE"),
    ("card 4111 1111 1111 1111 used", "4111 1111 1111 1111", "CODE"),
    ("card 5500-0000-0000-0004 used", "5500-0000-0000-0004", "CODE"),
    ("an application (no. 36110/97) against", "36110/97", "CODE"),
    ("case no. 31/1993/426/505 was", "31/1993/426/505", "CODE"),
    ("file no. 2001/123 and", "2001/123", "CODE"),
    ("reference no. 4521 of the", "4521", "CODE"),
    ("passport AB1234567 was", "AB1234567", "CODE"),
    ("SSN 078-05-1120 is", "078-05-1120", "CODE"),
    ("His hospital number is RX-448120.", "RX-448120", "CODE"),
    ("Her ID: AB-12345 expired.", "AB-12345", "CODE"),
])
def test_codes(text, expected, label):
    assert (expected, label) in _tagged(text)


@pytest.mark.parametrize("text,expected", [
    ("on 30 May 1996 the", "30 May 1996"),
    ("on 1st of June 2001 the", "1st of June 2001"),
    ("on May 30, 1996 the", "May 30, 1996"),
    ("in May 1996 the", "May 1996"),
    ("in late March 2004 the", "late March 2004"),
    ("on 25 August the", "25 August"),
    ("born in 1996 and", "1996"),
    ("on 30.05.1996 the", "30.05.1996"),
    ("on 30/05/96 the", "30/05/96"),
    ("on 1996-05-30 the", "1996-05-30"),
    ("in 1997/98 the", "1997/98"),
    ("from 1990-1995 the", "1990-1995"),
    ("in the 1970s the", "1970s"),
    ("at 10.30 a.m. the", "10.30 a.m."),
    ("at 14:45 the", "14:45"),
    ("at 9 p.m. the", "9 p.m."),
    ("for ninety-one days the", "ninety-one days"),
    ("for two years and six months the", "two years and six months"),
    ("for 3 weeks the", "3 weeks"),
])
def test_dates_and_times(text, expected):
    label = "DURATION" if expected.endswith(("days", "months", "weeks")) else "DATE"  # taggers/subtypes.py
    assert (expected, label) in _tagged(text)


@pytest.mark.parametrize("text,expected,label", [
    ("paid GBP 24,000 to", "GBP 24,000", "QUANTITY"),
    ("paid £325 to", "£325", "QUANTITY"),
    ("paid EUR 1,000,000 to", "EUR 1,000,000", "QUANTITY"),
    ("paid 1,717 kronor to", "1,717 kronor", "QUANTITY"),
    ("paid 15,800 euros [EUR] to", "15,800 euros [EUR]", "QUANTITY"),
    ("paid 2,000,000 Swedish kronor (SEK) to", "2,000,000 Swedish kronor (SEK)", "QUANTITY"),
    ("paid 500 USD to", "500 USD", "QUANTITY"),
    ("a flat of 63 sq. m in", "63 sq. m", "QUANTITY"),
    ("a 20% share", "20%", "QUANTITY"),
    ("when aged 45 he", "aged 45", "DEM"),
    ("a 45-year-old man", "45-year-old", "DEM"),
    ("at the age of three he", "at the age of three", "DEM"),
    ("he was eight years old", "eight years old", "DEM"),
])
def test_amounts_and_ages(text, expected, label):
    assert (expected, label) in _tagged(text)


@pytest.mark.parametrize("text,expected", [
    ("who lives at 27 Alder Road, Leeds.", "27 Alder Road"),
    ("He lives at 12 High Street, York.", "12 High Street"),
    ("at 221B Baker Street", "221B Baker Street"),
    ("She lives at Hauptstraße 5 in Berlin.", "Hauptstraße 5"),
    ("moved to Kungsgatan 12 in 2001", "Kungsgatan 12"),
])
def test_street_addresses(text, expected):
    assert (expected, "LOC") in _tagged(text)


@pytest.mark.parametrize("text,expected", [
    ("She lives at ul. Piotrkowska 12, 90-001 Łódź.", "ul. Piotrkowska 12, 90-001 Łódź"),
    ("from al. Jana Pawła II 5 in", "al. Jana Pawła II 5"),
    ("at Berliner Straße 12a, D-10115 Berlin.", "Berliner Straße 12a, D-10115 Berlin"),
    ("at Hauptstraße 5, 10115 Berlin, since", "Hauptstraße 5, 10115 Berlin"),
    ("lives at 12 rue de la Paix, 75002 Paris.", "12 rue de la Paix, 75002 Paris"),
    ("at 214, avenue Charlotte Gilles, 48907 Gauthier", "214, avenue Charlotte Gilles, 48907 Gauthier"),
    ("lives at Via Giuseppe Garibaldi 7, 20121 Milano.", "Via Giuseppe Garibaldi 7, 20121 Milano"),
    ("lives at Via Roma, 15 now", "Via Roma, 15"),
    ("at Karl Johans gate 12, 0154 Oslo.", "Karl Johans gate 12, 0154 Oslo"),
    ("at Storgata 5, 0155 Oslo.", "Storgata 5, 0155 Oslo"),
    ("at Kungsgatan 12, 111 22 Stockholm.", "Kungsgatan 12, 111 22 Stockholm"),
    ("at Nørregade 7, 1165 København K.", "Nørregade 7, 1165 København K"),
    ("at Gorlitzstr. 39, 18942 Donaueschingen.", "Gorlitzstr. 39, 18942 Donaueschingen"),
    ("at Anna-Marie-Zimmer-Platz 6, 67537 Senftenberg.", "Anna-Marie-Zimmer-Platz 6, 67537 Senftenberg"),
])
def test_european_street_addresses_with_postcodes(text, expected):
    assert (expected, "LOC") in _tagged(text)


@pytest.mark.parametrize("text,expected", [
    ("seen at Szpital Uniwersytecki im. Jana Mikulicza today", "Szpital Uniwersytecki im. Jana Mikulicza"),
    ("from Klinikum rechts der Isar.", "Klinikum rechts der Isar"),
    ("at Hôpital Saint-Louis, Paris", "Hôpital Saint-Louis"),
    ("at Ospedale San Raffaele.", "Ospedale San Raffaele"),
    ("at Oslo universitetssykehus.", "Oslo universitetssykehus"),
    ("works for Müller Bau GmbH in", "Müller Bau GmbH"),
    ("works for Kowalski i Syn Sp. z o.o. since", "Kowalski i Syn Sp. z o.o."),
    ("by Norsk Hydro ASA.", "Norsk Hydro ASA"),
])
def test_european_organisations(text, expected):
    assert (expected, "ORG") in _tagged(text)


@pytest.mark.parametrize("text", [
    "Write to jane.doe at example dot com.",       # no @
    "Call 12 34 now.",                             # too few digits for a phone
    "IBAN GB82 WEST 1234 5698 7654 33 here",       # mod-97 fails
    "card 4111 1111 1111 1112 used",               # Luhn fails
    "under section 23 of Law no. 5683 as",         # a law number, not an identifier
    "Article 6 § 1 of the Convention",             # article numbers
    "a 19966 result and 1,996 items",              # not years
    "on 32.13.1996 the",                           # impossible date
    "at 25:61 the",                                # impossible time
    "the MAY meeting in Convention",               # no digits
    "ABCDEF is a word",                            # letters only is not an ID code
    "he paid 24 to",                               # a number without a currency
    "three of the judges",                         # a count without a unit
    "the number is small",                         # no identifier after "number is"
    "take 2 Main courses",                         # no street word
    "Via email, as agreed",                        # "Via" with no house number
])
def test_near_misses_are_not_tagged(text):
    assert _tagged(text) == set()


def test_a_year_before_a_capitalised_word_is_no_postcode():
    assert _tagged("in 1996 Turkey ratified it") == {("1996", "DATE")}


def test_year_after_number_sign_is_not_a_date():
    assert ("1996", "DATE") not in _tagged("Law no. 1996 applies")


def test_year_range_needs_consecutive_years():
    assert ("1997/98", "DATE") in _tagged("in 1997/98 the")
    assert ("1997/95", "DATE") not in _tagged("in 1997/95 the")


def test_luhn_and_iban_checksums():
    assert luhn_valid("79927398713") and not luhn_valid("79927398710")
    assert iban_valid("GB82 WEST 1234 5698 7654 32") and not iban_valid("GB82 WEST 1234 5698 7654 31")


def test_spans_are_disjoint_and_sorted():
    text = "On 30 May 1996 at 10.30 a.m. he paid GBP 5,000 (application no. 36110/97)."
    spans = TAGGER.tag(text)
    assert spans == sorted(spans)
    assert all(a.end <= b.start for a, b in zip(spans, spans[1:]))
    assert {s.source.split(":")[0] for s in spans} == {"patterns"}


@pytest.mark.parametrize("text,expected", [
    ("Please page her on bleep 4417 today.", "4417"),
    ("the bank details ending 4471.", "4471"),
    ("paid into the account ending in 0923.", "0923"),
    ("call me on ext. 315 please", "315"),
    ("or on extension 2290.", "2290"),
    ("Our ref. DK/2231/LM", "DK/2231/LM"),
    ("quoting policy no. PP-7710293 in", "PP-7710293"),
    ("a van, registration KX19 LMV, overtook", "KX19 LMV"),
    ("my lorry, registration 171-D-48862, along", "171-D-48862"),
    ("her passport no. PAA123456 was", "PAA123456"),
    ("my crew number 7731.", "7731"),
    ("badge number 88214. My", "88214"),
    ("MRN: 0048-2213 Admitted", "0048-2213"),
    ("hospital no. RA 3390217, seen", "RA 3390217"),
    ("account 40118832, sort code 20-45-77.", "20-45-77"),
    ("Employee ID: E-204417", "E-204417"),
    ("NHS number 943 476 5919 and", "943 476 5919"),
    ("BIC COBADEFFXXX", "COBADEFFXXX"),
])
def test_codes_after_cue_words(text, expected):
    assert (expected, "CODE") in _tagged(text)


@pytest.mark.parametrize("text", [
    "the account of 1996 and",          # "of" is no link to a code
    "the staff of 40 people",           # a weak cue needs "number", "no.", "ID", ...
    "for the case 12 was",              # ditto
    "claim 2 of the applicant",         # ditto
    "Call bleep 7 now.",                # one digit is no code
    "the policy of the Government",     # no digits
])
def test_cue_words_without_a_code_tag_nothing(text):
    assert {label for _, label in _tagged(text)} <= {"DATE"}


def test_numbers_listed_after_nos_are_each_a_code():
    text = "plots nos. 19, 20, 28 and 29, sheet 4, and plots nos. 60/1/2, 63/1 and 63/3 were"
    codes = {span for span, label in _tagged(text) if label == "CODE"}
    assert codes == {"19", "20", "28", "29", "60/1/2", "63/1", "63/3"}
    assert ("4", "CODE") not in _tagged("nos. 19 and 20 were in zone 4")


@pytest.mark.parametrize("text,expected,label", [
    ("in the case ([2008] EWHC 860 (QB)), finding", "[2008] EWHC 860 (QB)", "CODE"),
    ("held hearings on 15, 17 and 24 January 1990. The", "15, 17 and 24 January 1990", "DATE"),
    ("a hearing date of 5 or 6 December 1994 for", "5 or 6 December 1994", "DATE"),
    ("their 18 year‑old daughter", "18 year‑old", "DEM"),
    ("turned 60 years of age. Prior", "60 years of age", "DEM"),
    ("Auld LJ then applied the test", "Auld LJ", "PERSON"),
    ("Infirmary\nWigan Lane, Wigan WN1 2NN\n", "Wigan Lane, Wigan WN1 2NN", "LOC"),
    ("at 3 Whitworth Street, Manchester M1 3GH.", "3 Whitworth Street, Manchester M1 3GH", "LOC"),
    ("at 14 Harcourt Terrace, Dublin, D02 YX88.", "14 Harcourt Terrace, Dublin, D02 YX88", "LOC"),
])
def test_citations_day_lists_ages_judges_and_postcode_addresses(text, expected, label):
    assert (expected, label) in _tagged(text)


@pytest.mark.parametrize("text", [
    "took the M1 motorway north",           # a road is no postcode
    "on 15 and 17 the",                     # days without a month
    "in [2008] the court",                  # a year in brackets is no citation
    "Auld then applied the test",           # a surname without LJ
])
def test_near_misses_of_the_new_families(text):
    assert {label for _, label in _tagged(text)} <= {"DATE"}
