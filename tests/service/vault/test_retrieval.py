"""Retrieval for /v1/ask reads the documents' public versions only (docs/privacy.md, "Asking the
vault: retrieval from public versions"): two vaults that differ only in span text retrieve the
same documents for every question, and the unsound variant (ranking the stored text) does not.
Real VaultStore on SQLite, real bm25s; no model."""

from __future__ import annotations

import pytest

pytest.importorskip("bm25s", reason="retrieval needs bm25s (the serve extra)")

from tests.service.conftest import LETTER  # noqa: E402
from tokendp.service.vault import retrieval  # noqa: E402
from tokendp.service.db import open_db  # noqa: E402
from tokendp.service.keys import create_key  # noqa: E402
from tokendp.service.vault.retrieval import Index, Retriever, public_version  # noqa: E402
from tokendp.service.vault.store import StoredDocument, VaultStore  # noqa: E402

# LETTER's spans: "Helen Marsh" [8, 19) and "Tomas Lindqvist" [54, 69); the neighbour's names have
# the same lengths (span positions and lengths are public, their text is not).
SPANS = ({"start": 8, "end": 19, "label": "PERSON"}, {"start": 54, "end": 69, "label": "PERSON", "subject": "p-7"})
NEIGHBOUR = LETTER[:8] + "Karin Welch" + LETTER[19:54] + "Jonas Bergqvist" + LETTER[69:]
WARD = "Ward 3 was closed on Monday for cleaning; visiting hours resume on Friday with Dr Lindqvist."
QUESTIONS = ["When was Lindqvist admitted?", "Helen Marsh", "Tomas", "Karin Welch Bergqvist", "patient admitted",
             "Which ward was closed?", "Lindqvist", "person", "date of admission", "zzz"]


def docs(letter: str) -> list[StoredDocument]:
    """A vault: two letters whose spans hold ``letter``'s names, and a note with no spans."""
    return [StoredDocument("a", "1", "", letter, SPANS, None, "confirmed"),
            StoredDocument("b", "1", "", letter.replace("2 June", "9 July"), SPANS, None, "confirmed"),
            StoredDocument("ward", "1", "", WARD, (), None, "confirmed")]


def rankings(letter: str) -> list[list[str]]:
    index = Index.build(docs(letter))
    return [index.top(q, 3) for q in QUESTIONS]


def test_the_public_version_hides_every_span_and_keeps_the_rest():
    (a, *_) = docs(LETTER)
    public = public_version(a)
    assert "Helen" not in public and "Lindqvist" not in public and public.count("[PERSON]") == 2
    assert public.startswith("Dear Dr ") and public.endswith(", admitted on 2 June 2024.")
    assert public_version(docs(NEIGHBOUR)[0]) == public


def test_neighbouring_vaults_retrieve_the_same_documents_for_every_question():
    assert rankings(LETTER) == rankings(NEIGHBOUR)
    assert rankings(LETTER)[QUESTIONS.index("Lindqvist")] == ["ward"]  # the public word only, not the span


def test_ranking_the_stored_text_would_differ_between_neighbours(monkeypatch):
    """The unsound variant: BM25 over the text as stored. The neighbour test above catches it."""
    monkeypatch.setattr(retrieval, "public_version", lambda d: d.text)
    assert rankings(LETTER) != rankings(NEIGHBOUR)
    assert {"a", "b"} <= set(rankings(LETTER)[QUESTIONS.index("Lindqvist")])  # read for a name in their spans


def test_only_positive_scores_by_score_then_id_at_most_k():
    index = Index.build(docs(LETTER))
    assert index.top("patient admitted", 3) == ["a", "b"]  # equal public versions' scores: by id
    assert index.top("patient admitted", 1) == ["a"]
    assert index.top("zzz", 3) == [] and index.top("the of", 3) == []
    assert Index.build([]).top("patient", 3) == []
    blank = StoredDocument("blank", "1", "", "the of a", (), None, "confirmed")  # only stopwords: the "" term
    assert Index.build([blank, *docs(LETTER)]).top("qqq", 3) == []


@pytest.fixture
def vault(tmp_path):
    conn = open_db(tmp_path / "v.db")
    _, tenant = create_key(conn, "clinic", budget=4.0)
    yield VaultStore(lambda: conn), tenant
    conn.close()


def store(vault, id: str, text: str, spans=SPANS, state: str = "confirmed") -> None:
    store_, tenant = vault
    store_.put(tenant, {"id": id, "title": "", "text": text, "spans": list(spans), "subject": None}, state=state,
               create=False)


def test_the_index_follows_the_owners_changes_and_never_holds_a_draft(vault):
    store_, tenant = vault
    retriever = Retriever(store_)
    store(vault, "a", LETTER)
    store(vault, "draft", WARD, spans=(), state="draft")
    assert retriever.search(tenant, "ward closed", 3) == []  # drafts are not indexed
    store(vault, "ward", WARD, spans=())
    assert retriever.search(tenant, "ward closed", 3) == ["ward"]  # added: rebuilt
    store(vault, "ward", LETTER)
    assert retriever.search(tenant, "ward closed", 3) == []  # replaced: rebuilt
    assert store_.confirm(tenant, "draft")
    assert retriever.search(tenant, "ward closed", 3) == ["draft"]  # confirmed: indexed
    assert store_.delete(tenant, "draft")
    assert retriever.search(tenant, "ward closed", 3) == []  # deleted
