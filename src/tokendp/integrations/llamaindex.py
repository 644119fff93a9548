"""tokendp in LlamaIndex (``pip install "tokendp[llamaindex]"``; docs/integrations.md, "LlamaIndex").

- :class:`TokenDPSanitizer`, a transformation (``TransformComponent``) for an
  ``IngestionPipeline``: each text node's text becomes its DP-Fusion rewrite, the certificate
  goes into ``metadata["tokendp"]`` (kept out of what embeddings and LLMs read). Spans come from
  ``metadata["spans"]`` (``{start, end, label}`` dicts or Presidio ``RecognizerResult``s, offsets
  into that node's text) or from the tagger.
- :class:`TokenDPVaultRetriever`, a retriever over a served vault for a reader key: the public
  rewrites that best match the query, as ``NodeWithScore``s with their certificates.

Bad input gives tokendp's own errors (:mod:`tokendp.errors`), before anything loads.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokendp._optional import require

require("llama_index.core", "llamaindex", "tokendp.integrations.llamaindex", package="llama-index-core")

from llama_index.core.retrievers import BaseRetriever  # noqa: E402
from llama_index.core.schema import (BaseNode, Document, ImageNode, NodeWithScore, QueryBundle,  # noqa: E402
                                     TextNode, TransformComponent)
from pydantic import PrivateAttr  # noqa: E402

from tokendp.errors import InvalidInputError  # noqa: E402
from tokendp.integrations._sanitizer import Sanitizer  # noqa: E402
from tokendp.integrations._vault import VaultClient, check_search  # noqa: E402

__all__ = ["TokenDPSanitizer", "TokenDPVaultRetriever"]

# A release's metadata that embeddings and LLMs do not read (the id and title they do).
_HIDDEN = ["certificate", "lifetime", "cached", "score"]


def _hide(keys: list[str], more: list[str]) -> list[str]:
    return [*keys, *(k for k in more if k not in keys)]


def _text_of(node: Any, i: int) -> str:
    """A text node's text; anything that also holds an image, audio or video is refused (only
    its text would be rewritten)."""
    media = [getattr(node, f"{kind}_resource", None) for kind in ("image", "audio", "video")]
    if not isinstance(node, (TextNode, Document)) or isinstance(node, ImageNode) or any(media):
        raise InvalidInputError(f"node #{i} ({type(node).__name__}) holds more than text; TokenDPSanitizer "
                                "rewrites text nodes (TextNode, Document with text only)")
    return node.text


class TokenDPSanitizer(TransformComponent):
    """Rewrite nodes with DP-Fusion in an ``IngestionPipeline``:
    ``IngestionPipeline(transformations=[TokenDPSanitizer(epsilon=8), SentenceSplitter()])``.

    ``params``: :func:`tokendp.sanitize`'s keyword arguments (``epsilon`` or ``beta``, ``model``,
    ``max_new_tokens``, ``seed``, ``tagger``, ``labels``, ``keep``, ...), checked here.
    ``spans_key``: the metadata key holding a node's spans (absent: the tagger finds them);
    ``certificate_key``: where the certificate goes; ``batch_size``: nodes per batch. Put it
    before a splitter: spans in metadata are offsets into the text they were found in.
    """

    spans_key: str = "spans"
    certificate_key: str = "tokendp"
    batch_size: int = 8
    params: dict[str, Any]
    _sanitizer: Sanitizer = PrivateAttr()

    def __init__(self, *, spans_key: str = "spans", certificate_key: str = "tokendp", batch_size: int = 8,
                 **params: Any) -> None:
        sanitizer = Sanitizer(params, spans_key=spans_key, certificate_key=certificate_key, batch_size=batch_size)
        super().__init__(spans_key=spans_key, certificate_key=certificate_key, batch_size=batch_size, params=params)
        self._sanitizer = sanitizer

    @classmethod
    def class_name(cls) -> str:
        return "TokenDPSanitizer"

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        """The rewritten nodes, one per input, in order (copies: the inputs are left as they are)."""
        nodes = list(nodes)
        out = self._sanitizer.rewrite([_text_of(n, i) for i, n in enumerate(nodes)], [n.metadata for n in nodes])
        rewritten = []
        for node, (text, metadata) in zip(nodes, out):
            new = node.model_copy()
            new.set_content(text)
            new.metadata = metadata
            new.excluded_embed_metadata_keys = _hide(node.excluded_embed_metadata_keys, [self.certificate_key])
            new.excluded_llm_metadata_keys = _hide(node.excluded_llm_metadata_keys, [self.certificate_key])
            rewritten.append(new)
        return rewritten


class TokenDPVaultRetriever(BaseRetriever):
    """The public rewrites of a served vault's documents that best match the query (BM25 over
    the rewrites), for a reader key (``$TOKENDP_KEY`` or ``key_file``).

    ``url``: the server (default ``$TOKENDP_URL``, else http://127.0.0.1:8000); ``epsilon``: each
    unit's epsilon per release; ``max_new_tokens``: T (None: the server's default);
    ``similarity_top_k``: how many documents; ``documents``: the ids to search (None: every
    confirmed document). The first search at given parameters releases each document it reads
    once, charged to its units' lifetime budgets; later searches get the stored rewrites at no
    cost (docs/vault.md). Each node's id is the document's id, its text the rewrite, its score
    the BM25 score, and its metadata ``id``, ``title``, ``certificate``, ``lifetime``,
    ``cached`` and ``score`` (only ``id`` and ``title`` are shown to embeddings and LLMs).
    """

    def __init__(self, *, epsilon: float, similarity_top_k: int = 4, max_new_tokens: int | None = None,
                 documents: list[str] | None = None, url: str | None = None, key_file: str | Path | None = None,
                 timeout: float = 600.0, **kwargs: Any) -> None:
        check_search(epsilon, similarity_top_k, max_new_tokens, documents)
        self._client = VaultClient(url, key_file=key_file, timeout=timeout, what="TokenDPVaultRetriever",
                                   extra="llamaindex")
        self._search = {"epsilon": epsilon, "k": similarity_top_k, "max_new_tokens": max_new_tokens,
                        "documents": documents}
        super().__init__(**kwargs)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        found = self._client.search(query_bundle.query_str, **self._search)
        return [NodeWithScore(node=TextNode(id_=r.id, text=r.text, metadata=r.metadata(),
                                            excluded_embed_metadata_keys=list(_HIDDEN),
                                            excluded_llm_metadata_keys=list(_HIDDEN)), score=r.score)
                for r in found]
