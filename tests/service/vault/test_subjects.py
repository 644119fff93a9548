"""One person, one id (issue 46, docs/vault.md "Subjects"): a subject id is stored in one
canonical form, so the spellings an owner gets from several systems are one unit with one
lifetime budget, on SQLite and on PostgreSQL; a database made before is migrated once, its
units merged with their spends added, and the owner's ledger shows the merge."""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.service.conftest import LETTER, auth
from tests.service.postgres import postgres_server, vault_db  # noqa: F401 (fixtures)
from tests.service.vault.helpers import SPANS
from tokendp.errors import InvalidInputError
from tokendp.service.schemas import SUBJECT
from tokendp.service.vault.units import FORMAT_RANGES, canonical_subject, subject_key

ANNA = ["Anna Schmidt", "Anna Schmidt ", " Anna Schmidt", "Anna  Schmidt", "Anna\u00a0Schmidt", "Anna\tSchmidt",
        "Anna Schm\u200bidt", "ANNA SCHMIDT", "\ufeffAnna\u2003Schmidt\n"]
JURGEN = ["Jürgen Müller", unicodedata.normalize("NFD", "Jürgen Müller"), "JÜRGEN MÜLLER"]


def test_every_spelling_of_one_id_is_one_canonical_id_and_others_stay_apart():
    assert {canonical_subject(s) for s in ANNA} == {"anna schmidt"}
    assert {canonical_subject(s) for s in JURGEN} == {"jürgen müller"}
    assert len({canonical_subject(s) for s in ("MRN-0042", "MRN-0043", "MRN 0042", "Anna Schmit")}) == 4
    assert canonical_subject("ＭＲＮ－００４２") == canonical_subject("mrn-0042")  # NFKC: full-width forms


@pytest.mark.parametrize("bad", ["Anna\x00Schmidt", "a\x07", "\x1fx", "x\x7f", "x\x9b"])
def test_a_control_character_is_refused_without_the_id_in_the_message(bad):
    with pytest.raises(InvalidInputError, match=r"control characters \(U\+00") as err:
        canonical_subject(bad)
    assert "Anna" not in str(err.value)


@pytest.mark.parametrize("blank", ["", " ", "\t\n", "\u200b", "\u00ad\u2060", "\ufeff \u200d"])
def test_an_id_with_nothing_left_is_refused(blank):
    with pytest.raises(InvalidInputError, match="empty"):
        canonical_subject(blank)


def test_the_format_ranges_hold_every_format_character_of_this_python():
    listed = {c for a, b in FORMAT_RANGES for c in range(a, b + 1)}
    found = {c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"}
    assert found <= listed and all(unicodedata.category(chr(c)) in ("Cf", "Cn") for c in listed)


IDS = st.text(st.sampled_from("aAbB ß\u00e9e\u0301\u00a0\t\n\u200b\u200d\ufeff\x00\x07\x85\u3000ﬁ\U000e0041Ｍ"), max_size=8)


@given(IDS)
@settings(max_examples=400, deadline=None)
def test_the_canonical_form_is_stable_and_the_schema_states_exactly_which_ids_it_takes(text):
    try:
        once = canonical_subject(text)
    except InvalidInputError:
        assert re.search(SUBJECT, text) is None
        return
    assert re.search(SUBJECT, text) is not None
    assert canonical_subject(once) == once and once == once.strip() and "  " not in once


@pytest.mark.slow
def test_every_spelling_is_one_unit_charged_against_one_budget(vault_db):
    """Through the routes, on each database: documents stored with each spelling as their
    subject (as a document's and as a span's own) are all one unit, which every release
    charges; the ledger holds that one subject, and the control character is refused."""
    from fastapi.testclient import TestClient

    from tests.service.vault.helpers import make_keys
    from tokendp.service.app import create_app

    owner, reader = make_keys(vault_db, "clinic", "owner", "reader", budget=8.0)
    with TestClient(create_app(vault_db, model="tiny", tagger="patterns")) as client:
        for i, spelling in enumerate(ANNA + JURGEN):
            bare = [{k: v for k, v in span.items() if k != "subject"} for span in SPANS]
            spans = [bare[0], {**bare[1], "subject": spelling}] if i % 2 else bare
            body = {"id": f"d{i}", "text": LETTER, "spans": spans, **({} if i % 2 else {"subject": spelling})}
            stored = client.post("/v1/documents", json=body, headers=auth(owner))
            assert stored.status_code == 201, stored.text
        refused = client.post("/v1/documents", headers=auth(owner),
                              json={"id": "bad", "text": LETTER, "spans": SPANS, "subject": "Anna\x00Schmidt"})
        assert refused.status_code == 422 and "Anna" not in refused.text
        for i in range(len(ANNA) + len(JURGEN)):
            reply = client.get(f"/v1/documents/d{i}/rewrite", params={"epsilon": 6.0, "max_new_tokens": 2},
                               headers=auth(reader))
            assert reply.status_code == 200, reply.text
        book = client.get("/v1/ledger", headers=auth(owner)).json()
    subjects = {u["subject"]: u for u in book["units"] if "subject" in u}
    assert set(subjects) == {"anna schmidt", "jürgen müller"}
    spent = _spent_by_unit(vault_db)
    for name, unit in subjects.items():
        assert 0 < unit["spent"] <= book["budget"] and unit["spent"] >= float(spent[subject_key(name)])


def _spent_by_unit(db) -> dict[str, Fraction]:
    from tokendp.service.db import open_db

    conn = open_db(db)
    try:
        out: dict[str, Fraction] = {}
        for r in conn.execute("SELECT unit, spent FROM reservations WHERE spent IS NOT NULL").fetchall():
            out[r["unit"]] = out.get(r["unit"], Fraction(0)) + Fraction(r["spent"])
        return out
    finally:
        conn.close()


def test_an_old_database_is_migrated_once_its_units_merged_with_their_spends_added(vault_db):
    """A vault from before canonical ids: documents and units under three spellings of one
    subject (and one of another), an open reservation and ticket of a dead server under one of
    them. Opening it merges them into one unit whose spend is the sum, moves the open hold,
    rewrites the documents' subjects, and records each merge, which the ledger shows; opening
    it again changes nothing."""
    from tokendp.service.db import open_db
    from tokendp.service.keys import create_key
    from tokendp.service.vault.store import VaultStore

    conn = open_db(vault_db)
    _, tenant = create_key(conn, "clinic", budget=8.0)
    old = {"Anna Schmidt": 0.25, "anna schmidt ": 0.5, "Anna\u00a0Schmidt": 0.125, "MRN-7": 0.0625}
    spans = [{"start": 8, "end": 19, "label": "PERSON", "subject": "Anna  Schmidt"}]
    with conn.write():
        conn.execute("DROP TABLE unit_merges")  # as a database made by the version before
        for subject, spent in old.items():
            conn.execute("INSERT INTO units (tenant, unit, spent) VALUES (?, ?, ?)",
                         ("clinic", json.dumps(["subject", subject]), spent))
        conn.execute("INSERT INTO documents (tenant, id, version, title, text, spans, subject, state, created, "
                     "updated) VALUES ('clinic', 'd1', 'v1', '', ?, ?, ?, 'confirmed', 'then', 'then')",
                     (LETTER, json.dumps(spans), " ANNA SCHMIDT"))
        rid = conn.insert("INSERT INTO releases (tenant, document, version, params, reader, tokens, state, created, "
                          "holder) VALUES ('clinic', 'd1', 'v1', '{}', 'r', 4, 'open', 'then', 'dead')")
        for unit in ("Anna Schmidt", "anna schmidt "):
            conn.execute("INSERT INTO reservations (release_id, tenant, unit, reserved) VALUES (?, 'clinic', ?, 0.25)",
                         (rid, json.dumps(["subject", unit])))
            conn.execute("INSERT INTO tickets (release_id, tenant, unit) VALUES (?, 'clinic', ?)",
                         (rid, json.dumps(["subject", unit])))
    conn.close()
    for _ in range(2):  # the second open finds the table made: nothing runs again
        conn = open_db(vault_db)
        book = VaultStore(lambda: conn).ledger(tenant)
        units = {u["subject"]: u for u in book["units"]}
        assert set(units) == {"anna schmidt", "mrn-7"}
        anna = units["anna schmidt"]
        assert anna["spent"] == 0.875 and anna["reserved"] == 0.5  # 0.25 + 0.5 + 0.125; the open hold moved
        assert sorted((m["subject"], m["spent"]) for m in anna["merged"]) == [
            ("Anna Schmidt", 0.25), ("Anna\u00a0Schmidt", 0.125), ("anna schmidt ", 0.5)]
        assert units["mrn-7"]["merged"] == [{"subject": "MRN-7", "spent": 0.0625, "at": units["mrn-7"]["merged"][0]["at"]}]
        doc = VaultStore(lambda: conn).get(tenant, "d1")
        assert doc.subject == "anna schmidt" and doc.spans[0]["subject"] == "anna schmidt"
        held = conn.execute("SELECT unit FROM tickets WHERE release_id = ?", (rid,)).fetchall()
        assert [r["unit"] for r in held] == [subject_key("anna schmidt")]
        conn.close()
