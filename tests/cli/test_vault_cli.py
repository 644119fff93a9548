"""``tokendp vault add`` and ``tokendp keys create --role`` from the command line (the vault's
server side is tested over HTTP in tests/service/vault/)."""

from __future__ import annotations

import json
import sqlite3

import pytest
from click.testing import CliRunner

from tokendp.cli import main
from tokendp.cli._exit import EXIT_BAD_INPUT

LETTER = "Dear Dr Helen Marsh, I am writing about my patient Mr Tomas Lindqvist."
SPANS = [{"start": 8, "end": 19, "label": "PERSON"}, {"start": 54, "end": 69, "label": "PERSON", "subject": "p-7"}]


def _corpus(path, *records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


def _setup(tmp_path):
    db = str(tmp_path / "s.db")
    made = CliRunner().invoke(main, ["keys", "create", "--tenant", "clinic", "--role", "reader", "--db", db])
    assert made.exit_code == 0 and "reader key" in made.stderr
    listed = json.loads(CliRunner().invoke(main, ["keys", "list", "--json", "--db", db]).stdout)
    assert [k["role"] for k in listed] == ["reader"]
    return db


def _stored(db) -> list[tuple]:
    return sqlite3.connect(db).execute("SELECT id, title, state, spans FROM documents ORDER BY id").fetchall()


def test_vault_add_stores_confirmed_documents_and_tags_the_others_as_drafts(tmp_path):
    db = _setup(tmp_path)
    corpus = _corpus(tmp_path / "c.jsonl", {"id": "a", "title": "one", "text": LETTER, "spans": SPANS, "subject": "p-7"},
                     {"id": "b", "text": LETTER})
    result = CliRunner().invoke(main, ["vault", "add", corpus, "--tenant", "clinic", "--tagger", "patterns",
                                       "--db", db])
    assert result.exit_code == 0, result.output
    assert "stored 2 documents" in result.stderr and "1 drafts" in result.stderr and "Marsh" not in result.output
    (a, b) = _stored(db)
    assert a[:3] == ("a", "one", "confirmed") and json.loads(a[3]) == SPANS
    assert b[:3] == ("b", "", "draft")
    again = CliRunner().invoke(main, ["vault", "add", corpus, "--tenant", "clinic", "--db", db])
    assert again.exit_code == EXIT_BAD_INPUT and "--replace" in again.output
    assert CliRunner().invoke(main, ["vault", "add", corpus, "--tenant", "clinic", "--replace", "--tagger",
                                     "patterns", "--db", db]).exit_code == 0


def test_one_bad_record_stores_nothing_and_never_echoes_the_text(tmp_path):
    db = _setup(tmp_path)
    corpus = _corpus(tmp_path / "c.jsonl", {"id": "a", "text": LETTER, "spans": SPANS},
                     {"id": "b", "text": LETTER, "spans": [{"start": 8, "end": 19, "label": "NAME"}]})
    result = CliRunner().invoke(main, ["vault", "add", corpus, "--tenant", "clinic", "--db", db])
    assert result.exit_code == EXIT_BAD_INPUT and "line 2" in result.output and "spans.0.label" in result.output
    assert "Marsh" not in result.output and _stored(db) == []
    unknown = CliRunner().invoke(main, ["vault", "add", corpus, "--tenant", "nobody", "--db", db])
    assert unknown.exit_code != 0 and "keys create" in unknown.output


@pytest.mark.parametrize("record", [
    {"id": "b", "text": LETTER, "subject": 7},
    {"id": "b", "text": LETTER, "subject": ["p-7"]},
    {"id": "b", "text": LETTER, "spans": [{"start": True, "end": 19, "label": "PERSON"}]},
    {"id": "b", "text": LETTER, "spans": [{"start": 8, "end": 19, "label": "PERSON", "subject": "p\u0000"}]},
    {"id": "b/c", "text": LETTER, "spans": []},
    {"id": "b", "text": LETTER, "spans": [], "owner": "me"},
    {"id": 3, "text": LETTER},
])
def test_a_record_the_route_refuses_is_refused_by_the_same_schema_naming_its_line(tmp_path, record):
    """Issue 46: `vault add` validates each record with the route's own model: an integer or
    list subject, a boolean offset, a NUL, a '/' in the id or an unknown field stops with a
    message naming the line and the field, never a traceback, and stores nothing."""
    db = _setup(tmp_path)
    corpus = _corpus(tmp_path / "c.jsonl", {"id": "a", "text": LETTER, "spans": SPANS}, record)
    result = CliRunner().invoke(main, ["vault", "add", corpus, "--tenant", "clinic", "--db", db])
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    assert "line 2 does not match the document schema" in result.output and "Traceback" not in result.output
    assert "Marsh" not in result.output and _stored(db) == []


def test_a_file_is_stored_in_one_transaction_and_subjects_canonical(tmp_path, monkeypatch):
    """A failure while writing the third record leaves the vault as it was; an id the vault
    holds, on line 3, stores nothing and names line 3; a clean file stores every record with
    its subjects in their canonical form."""
    from tokendp.service.vault.store import VaultStore

    db = _setup(tmp_path)
    records = [{"id": i, "text": LETTER, "spans": SPANS, "subject": " Anna  SCHMIDT"} for i in "abc"]
    corpus = _corpus(tmp_path / "c.jsonl", *records)
    real, calls = VaultStore._put, []

    def third_fails(conn, *args):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("the disk is full")
        return real(conn, *args)

    monkeypatch.setattr(VaultStore, "_put", staticmethod(third_fails))
    failed = CliRunner().invoke(main, ["vault", "add", corpus, "--tenant", "clinic", "--db", db])
    assert failed.exit_code != 0 and len(calls) == 3 and _stored(db) == []
    monkeypatch.undo()
    _corpus(tmp_path / "c-only.jsonl", records[2])
    assert CliRunner().invoke(main, ["vault", "add", str(tmp_path / "c-only.jsonl"), "--tenant", "clinic",
                                     "--db", db]).exit_code == 0
    held = CliRunner().invoke(main, ["vault", "add", corpus, "--tenant", "clinic", "--db", db])
    assert held.exit_code == EXIT_BAD_INPUT and "line 3: the vault holds this id" in held.output
    assert [r[0] for r in _stored(db)] == ["c"]
    assert CliRunner().invoke(main, ["vault", "add", corpus, "--tenant", "clinic", "--replace", "--db", db]).exit_code == 0
    subjects = sqlite3.connect(db).execute("SELECT DISTINCT subject FROM documents").fetchall()
    assert subjects == [("anna schmidt",)]
