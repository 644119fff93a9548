"""tokendp in LangChain (docs/integrations.md, "LangChain"): the document transformer and the vault
retriever, against the real langchain-core; the docs' examples run as written."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_core", reason="the langchain extra is not installed")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.runnables import RunnableLambda  # noqa: E402

from tests.engines.corpora import model_dir  # noqa: E402
from tests.integrations.conftest import DOCUMENTS, SECRETS  # noqa: E402
from tests.integrations.examples import run  # noqa: E402
from tokendp.errors import InvalidInputError, InvalidParameterError, TokenDPError  # noqa: E402
from tokendp.integrations.langchain import TokenDPSanitizer, TokenDPVaultRetriever  # noqa: E402

LETTER = DOCUMENTS[0]["text"]
SPANS = DOCUMENTS[0]["spans"]


def test_the_docs_sanitizer_example_rewrites_each_document_with_its_certificate():
    found = run("LangChain", 0)
    safe, docs = found["safe"], found["docs"]
    assert [d.metadata["source"] for d in safe] == ["letter-1.txt", "note-7.txt"]
    assert all("spans" not in d.metadata for d in safe)  # offsets into the original: dropped
    first = safe[0].metadata["tokendp"]
    assert first["spans_source"] == "given" and {g["label"] for g in first["groups"]} == {"PERSON", "DATE"}
    assert all(g["epsilon"] == 8 for g in first["groups"])
    assert safe[1].metadata["tokendp"]["spans_source"].startswith("tagger auto")
    assert docs[0].page_content == LETTER and "spans" in docs[0].metadata  # the inputs are left as they are


def test_a_seeded_sanitizer_gives_each_document_what_one_batch_would(monkeypatch):
    """Batches of one, or all at once: document i's stream is document_seed(seed, i) either way."""
    docs = [Document(page_content=LETTER, metadata={"spans": SPANS}, id="a"),
            Document(page_content=DOCUMENTS[1]["text"], metadata={"spans": DOCUMENTS[1]["spans"]}, id="b")]
    one = TokenDPSanitizer(epsilon=8, model=model_dir(), max_new_tokens=8, seed=3, batch_size=1)
    both = TokenDPSanitizer(epsilon=8, model=model_dir(), max_new_tokens=8, seed=3, batch_size=2)
    a, b = one.transform_documents(docs), both.transform_documents(docs)
    assert [d.page_content for d in a] == [d.page_content for d in b]
    assert [d.id for d in a] == ["a", "b"]


def test_presidio_results_in_metadata_are_spans():
    from presidio_analyzer import RecognizerResult

    results = [RecognizerResult("PERSON", 8, 19, 0.9), RecognizerResult("DATE_TIME", 83, 94, 0.6)]
    [out] = TokenDPSanitizer(epsilon=8, model=model_dir(), max_new_tokens=4, seed=0).transform_documents(
        [Document(page_content=LETTER, metadata={"spans": results})])
    assert {g["label"] for g in out.metadata["tokendp"]["groups"]} == {"PERSON", "DATETIME"}


@pytest.mark.parametrize("make,error,words", [
    (lambda: TokenDPSanitizer(epsilon=-1), InvalidParameterError, "epsilon"),
    (lambda: TokenDPSanitizer(epsilon=8, epsilonn=3), InvalidParameterError, "unknown parameter(s) epsilonn"),
    (lambda: TokenDPSanitizer(epsilon=8, seed="0"), InvalidParameterError, "seed"),
    (lambda: TokenDPSanitizer(epsilon=8, diagnostics=True), InvalidParameterError, "diagnostics"),
    (lambda: TokenDPSanitizer(epsilon=8, batch_size=0), InvalidParameterError, "batch_size"),
])
def test_bad_settings_are_refused_when_the_transformer_is_built(make, error, words):
    with pytest.raises(error) as info:
        make()
    assert words in str(info.value)


@pytest.mark.parametrize("docs,words", [
    (["a string"], "document #0 is a str, not a langchain Document"),
    ([Document(page_content=LETTER), Document(page_content=" ")], "document #1 has no text"),
    ([Document(page_content=LETTER, metadata={"spans": [{"start": 8, "end": 500, "label": "PERSON"}]})],
     "document #0, metadata['spans']"),
    ([Document(page_content=LETTER, metadata={"spans": [{"start": 8, "label": "PERSON"}]})], "document #0"),
    ([Document(page_content=LETTER, metadata={"spans": "Helen Marsh"})], "spans are a list"),
])
def test_bad_documents_give_tokendps_errors_before_the_model_loads(monkeypatch, docs, words):
    import tokendp.backends

    monkeypatch.setattr(tokendp.backends, "load_backend", lambda *a, **k: pytest.fail("the model loaded"))
    with pytest.raises(InvalidInputError) as info:
        TokenDPSanitizer(epsilon=8).transform_documents(docs)
    assert words in str(info.value) and not any(s in str(info.value) for s in SECRETS)


# ---------------------------------------------------------------------------- the vault retriever
def test_the_docs_retriever_example_returns_releases_with_certificates_and_charges_once(reader_env):
    found = run("LangChain", 1)
    hits = found["hits"]
    assert hits and len(hits) <= 2
    for doc in hits:
        meta = doc.metadata
        assert doc.id == meta["id"] in {d["id"] for d in DOCUMENTS} and meta["score"] > 0
        assert meta["title"] == next(d["title"] for d in DOCUMENTS if d["id"] == doc.id)
        assert meta["certificate"]["accounting"] == "filter" and meta["lifetime"]["epsilon"] == 4
        assert "patient-7" not in str(meta)  # subjects never leave the server
    again = TokenDPVaultRetriever(epsilon=3, max_new_tokens=32, k=2).invoke("patient admitted")
    assert [d.page_content for d in again] == [d.page_content for d in hits]
    assert all(d.metadata["cached"] for d in again)  # the stored rewrites, at no cost
    chained = (TokenDPVaultRetriever(epsilon=3, max_new_tokens=32, k=2)
               | RunnableLambda(lambda docs: [d.id for d in docs])).invoke("patient admitted")
    assert chained == [d.id for d in hits]


def test_documents_limit_the_search_and_an_unknown_id_is_tokendps_not_found(reader_env):
    only = TokenDPVaultRetriever(epsilon=3, max_new_tokens=32, documents=["note-7"]).invoke("patient admitted")
    assert [d.id for d in only] in ([], ["note-7"])
    with pytest.raises(InvalidInputError, match="404 not_found"):
        TokenDPVaultRetriever(epsilon=3, max_new_tokens=32, documents=["no-such"]).invoke("patient")


def test_the_key_comes_from_a_file_and_is_never_shown(reader_env, tmp_path, monkeypatch):
    monkeypatch.delenv("TOKENDP_KEY")
    key_file = tmp_path / "reader.key"
    key_file.write_text(reader_env.reader + "\n")
    retriever = TokenDPVaultRetriever(epsilon=3, max_new_tokens=32, key_file=key_file)
    assert reader_env.reader not in repr(retriever) and reader_env.reader not in str(retriever.model_dump())
    assert retriever.invoke("patient admitted") is not None
    key_file.write_text("tdp_not_a_key\n")
    with pytest.raises(TokenDPError, match="401 unauthorized") as info:
        TokenDPVaultRetriever(epsilon=3, key_file=key_file).invoke("patient")
    assert "tdp_not_a_key" not in str(info.value)


@pytest.mark.parametrize("kwargs,error,words", [
    ({"epsilon": -1}, InvalidParameterError, "epsilon"),
    ({"epsilon": "three"}, InvalidParameterError, "epsilon"),
    ({"epsilon": 3, "k": 0}, InvalidParameterError, "k (how many"),
    ({"epsilon": 3, "max_new_tokens": 0}, InvalidParameterError, "max_new_tokens"),
    ({"epsilon": 3, "documents": "letter-1"}, InvalidParameterError, "documents"),
    ({"epsilon": 3, "url": "localhost:8000"}, InvalidParameterError, "http://"),
    ({"epsilon": 3, "key_file": "/no/such/file"}, InvalidInputError, "key file not found"),
])
def test_bad_retriever_settings_are_tokendps_errors_not_pydantics(monkeypatch, kwargs, error, words):
    monkeypatch.setenv("TOKENDP_KEY", "tdp_test")
    with pytest.raises(error) as info:
        TokenDPVaultRetriever(**kwargs)
    assert words in str(info.value)


def test_no_key_and_no_server_are_clear_errors(monkeypatch):
    monkeypatch.delenv("TOKENDP_KEY", raising=False)
    with pytest.raises(InvalidParameterError, match="TOKENDP_KEY"):
        TokenDPVaultRetriever(epsilon=3)
    monkeypatch.setenv("TOKENDP_KEY", "tdp_test")
    retriever = TokenDPVaultRetriever(epsilon=3, url="http://127.0.0.1:9")  # nothing listens on port 9
    with pytest.raises(TokenDPError, match="cannot reach the vault at http://127.0.0.1:9") as info:
        retriever.invoke("patient")
    assert "tdp_test" not in str(info.value)
    with pytest.raises(InvalidInputError, match="a query is a string"):
        retriever.invoke(42)
