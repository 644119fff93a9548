"""tokendp in LlamaIndex (docs/integrations.md, "LlamaIndex"): the ingestion transformation and the
vault retriever, against the real llama-index-core; the docs' examples run as written."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_index.core", reason="the llamaindex extra is not installed")

from llama_index.core import Document  # noqa: E402
from llama_index.core.ingestion import IngestionPipeline  # noqa: E402
from llama_index.core.schema import ImageNode, MetadataMode, TextNode  # noqa: E402

from tests.engines.corpora import model_dir  # noqa: E402
from tests.integrations.conftest import DOCUMENTS, SECRETS  # noqa: E402
from tests.integrations.examples import run  # noqa: E402
from tokendp.errors import InvalidInputError, InvalidParameterError  # noqa: E402
from tokendp.integrations.llamaindex import TokenDPSanitizer, TokenDPVaultRetriever  # noqa: E402

LETTER = DOCUMENTS[0]["text"]


def test_the_docs_pipeline_example_rewrites_nodes_and_hides_the_certificate_from_models():
    nodes = run("LlamaIndex", 0)["nodes"]
    assert len(nodes) == 2
    for node in nodes:
        certificate = node.metadata["tokendp"]
        assert certificate["mechanism"] == "dp-fusion" and "spans" not in node.metadata
        for mode in (MetadataMode.EMBED, MetadataMode.LLM):
            assert "dp-fusion" not in node.get_content(metadata_mode=mode)  # models read the text, not the report
    assert {g["label"] for g in nodes[0].metadata["tokendp"]["groups"]} == {"PERSON"}
    assert nodes[1].metadata["tokendp"]["spans_source"].startswith("tagger auto")


def test_the_transformation_copies_nodes_and_a_rerun_comes_from_the_pipelines_cache():
    node = TextNode(text=LETTER, id_="n1", metadata={"spans": DOCUMENTS[0]["spans"], "ward": 3})
    pipeline = IngestionPipeline(transformations=[TokenDPSanitizer(epsilon=8, model=model_dir(), max_new_tokens=6,
                                                                   seed=1)])
    [out] = pipeline.run(nodes=[node])
    assert out.id_ == "n1" and out.metadata["ward"] == 3 and node.text == LETTER  # the input is left as it was
    [again] = pipeline.run(nodes=[TextNode(text=LETTER, id_="n1", metadata={"spans": DOCUMENTS[0]["spans"],
                                                                            "ward": 3})])
    assert again.text == out.text  # the stored rewrite: post-processing, no second release


@pytest.mark.parametrize("nodes,words", [
    ([ImageNode(text="a scan of Helen Marsh's chart", image="aGVsbG8=")], "node #0 (ImageNode) holds more than text"),
    ([TextNode(text=LETTER), TextNode(text="")], "document #1 has no text"),
    ([TextNode(text=LETTER, metadata={"spans": [{"start": 8, "end": 400, "label": "PERSON"}]})],
     "document #0, metadata['spans']: a span ends at character 400"),
])
def test_bad_nodes_give_tokendps_errors_through_the_pipeline_before_the_model_loads(monkeypatch, nodes, words):
    import tokendp.backends

    monkeypatch.setattr(tokendp.backends, "load_backend", lambda *a, **k: pytest.fail("the model loaded"))
    pipeline = IngestionPipeline(transformations=[TokenDPSanitizer(epsilon=8)])
    with pytest.raises(InvalidInputError) as info:
        pipeline.run(nodes=nodes)
    assert words in str(info.value) and not any(s in str(info.value) for s in SECRETS)


def test_bad_settings_are_tokendps_errors_not_pydantics():
    with pytest.raises(InvalidParameterError, match="unknown parameter"):
        TokenDPSanitizer(epsilon=8, temprature=0.5)
    with pytest.raises(InvalidParameterError, match="spans_key"):
        TokenDPSanitizer(epsilon=8, spans_key=3)
    with pytest.raises(InvalidParameterError, match="k \\(how many"):
        TokenDPVaultRetriever(epsilon=3, similarity_top_k=0)


def test_the_docs_retriever_example_returns_scored_releases_with_certificates(reader_env):
    namespace = run("LlamaIndex", 1)
    hits = namespace["retriever"].retrieve("patient admitted")
    assert hits and len(hits) <= 2
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True) and scores[-1] > 0
    for hit in hits:
        meta = hit.node.metadata
        assert hit.node.id_ == meta["id"] and meta["certificate"]["accounting"] == "filter"
        assert meta["title"] in hit.node.get_content(metadata_mode=MetadataMode.LLM)
        assert "filter" not in hit.node.get_content(metadata_mode=MetadataMode.LLM)  # the certificate is not
    with pytest.raises(InvalidInputError, match="404 not_found"):
        TokenDPVaultRetriever(epsilon=3, documents=["no-such"]).retrieve("patient")
