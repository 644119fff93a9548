"""tokendp in LangChain (``pip install "tokendp[langchain]"``; docs/integrations.md, "LangChain").

- :class:`TokenDPSanitizer`, a document transformer: each ``Document``'s ``page_content``
  becomes its DP-Fusion rewrite, the certificate goes into ``metadata["tokendp"]``. Spans come
  from ``metadata["spans"]`` (``{start, end, label}`` dicts or Presidio ``RecognizerResult``s)
  or from the tagger.
- :class:`TokenDPVaultRetriever`, a retriever over a served vault for a reader key: the
  public rewrites of the vault's documents that best match the query, as ``Document``s with
  their certificates (``metadata["certificate"]``), usable in a chain as any retriever is.

Bad input gives tokendp's own errors (:mod:`tokendp.errors`), before anything loads.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokendp._optional import require

require("langchain_core", "langchain", "tokendp.integrations.langchain", package="langchain-core")

from langchain_core.callbacks import CallbackManagerForRetrieverRun  # noqa: E402
from langchain_core.documents import BaseDocumentTransformer, Document  # noqa: E402
from langchain_core.retrievers import BaseRetriever  # noqa: E402
from pydantic import PrivateAttr  # noqa: E402

from tokendp.errors import InvalidInputError  # noqa: E402
from tokendp.integrations._sanitizer import Sanitizer  # noqa: E402
from tokendp.integrations._vault import VaultClient, check_search  # noqa: E402

__all__ = ["TokenDPSanitizer", "TokenDPVaultRetriever"]


class TokenDPSanitizer(BaseDocumentTransformer):
    """Rewrite ``Document``s with DP-Fusion: ``TokenDPSanitizer(epsilon=8).transform_documents(docs)``.

    ``params``: :func:`tokendp.sanitize`'s keyword arguments (``epsilon`` or ``beta``, ``model``,
    ``max_new_tokens``, ``seed``, ``tagger``, ``labels``, ``keep``, ...), checked here.
    ``spans_key``: the metadata key holding a document's spans (absent: the tagger finds them);
    ``certificate_key``: where the certificate goes; ``batch_size``: documents per batch. The
    returned documents keep their ids and the rest of their metadata, which is not rewritten.
    """

    def __init__(self, *, spans_key: str = "spans", certificate_key: str = "tokendp", batch_size: int = 8,
                 **params: Any) -> None:
        self._sanitizer = Sanitizer(params, spans_key=spans_key, certificate_key=certificate_key,
                                    batch_size=batch_size)

    def transform_documents(self, documents: Sequence[Document], **kwargs: Any) -> Sequence[Document]:
        """The rewrites, one ``Document`` per input, in order."""
        documents = list(documents)
        for i, doc in enumerate(documents):
            if not isinstance(doc, Document):
                raise InvalidInputError(f"document #{i} is a {type(doc).__name__}, not a langchain Document")
        out = self._sanitizer.rewrite([d.page_content for d in documents], [d.metadata for d in documents])
        return [Document(page_content=text, metadata=metadata, id=doc.id)
                for doc, (text, metadata) in zip(documents, out)]


class TokenDPVaultRetriever(BaseRetriever):
    """The public rewrites of a served vault's documents that best match the query (BM25 over
    the rewrites), for a reader key (``$TOKENDP_KEY`` or ``key_file``).

    ``url``: the server (default ``$TOKENDP_URL``, else http://127.0.0.1:8000); ``epsilon``: each
    unit's epsilon per release; ``max_new_tokens``: T (None: the server's default); ``k``: how
    many documents; ``documents``: the ids to search (None: every confirmed document). The first
    search at given parameters releases each document it reads once, charged to its units'
    lifetime budgets; later searches get the stored rewrites at no cost (docs/vault.md).
    Each ``Document`` has the rewrite as ``page_content``, its id as ``id`` and, in its
    metadata, ``id``, ``title``, ``certificate``, ``lifetime``, ``cached`` and ``score``.
    """

    url: str | None = None
    epsilon: float
    k: int = 4
    max_new_tokens: int | None = None
    documents: list[str] | None = None
    key_file: Path | None = None
    timeout: float = 600.0
    _client: VaultClient = PrivateAttr()

    def __init__(self, *, epsilon: float, k: int = 4, max_new_tokens: int | None = None,
                 documents: list[str] | None = None, url: str | None = None, key_file: str | Path | None = None,
                 timeout: float = 600.0, **kwargs: Any) -> None:
        check_search(epsilon, k, max_new_tokens, documents)  # tokendp's errors, before pydantic's
        client = VaultClient(url, key_file=key_file, timeout=timeout, what="TokenDPVaultRetriever", extra="langchain")
        super().__init__(epsilon=epsilon, k=k, max_new_tokens=max_new_tokens, documents=documents, url=client.url,
                         key_file=key_file, timeout=timeout, **kwargs)
        self._client = client

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        found = self._client.search(query, epsilon=self.epsilon, k=self.k, max_new_tokens=self.max_new_tokens,
                                    documents=self.documents)
        return [Document(page_content=r.text, metadata=r.metadata(), id=r.id) for r in found]
