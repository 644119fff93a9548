"""``tokendp vault add`` and ``tokendp keys create --role`` from the command line (the vault's
server side is tested over HTTP in tests/service/vault/)."""

from __future__ import annotations

import json
import sqlite3

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
    assert result.exit_code == EXIT_BAD_INPUT and "line 2" in result.output and "NAME" in result.output
    assert "Marsh" not in result.output and _stored(db) == []
    unknown = CliRunner().invoke(main, ["vault", "add", corpus, "--tenant", "nobody", "--db", db])
    assert unknown.exit_code != 0 and "keys create" in unknown.output
