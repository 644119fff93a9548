"""Which stored documents a question reads (``POST /v1/ask``), from their PUBLIC versions only
(docs/privacy.md, "Asking the vault: retrieval from public versions").

The public version of a document (:func:`public_version`) is its text with every span replaced
by its label in brackets (``[PERSON]``): a function of the text outside the spans and of the
spans' positions and labels, which the vault's adjacency keeps public, and of nothing a span
holds. BM25 (the ``bm25s`` library: Lucene's variant, k1 = 1.5, b = 0.75, English stopwords,
no stemming) scores the public versions of the tenant's confirmed documents against the
question,

    score(q, d) = sum over the question's terms t of idf(t) tf(t, d) (k1 + 1)
                  / (tf(t, d) + k1 (1 - b + b |d| / avgdl)),

with idf, |d| and avgdl over those public versions; the documents read are the ``top_k`` of
score > 0 in order of (-score, id). Every input is public (the question is the reader's own),
so the list is too, and may be shown to the reader.

The index is per tenant and in memory, per server process. Each search reads the (id, version)
of the tenant's confirmed documents from the database and rebuilds the index when they differ
from the ones it was built from: an owner added, replaced, confirmed or deleted a document, on
this process or another one sharing the database. Drafts are never indexed.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tokendp.errors import MissingDependencyError
from tokendp.service.keys import Tenant
from tokendp.service.vault.store import StoredDocument, VaultStore

STOPWORDS = "en"


def public_version(document: StoredDocument) -> str:
    """The document as the public row shows it, for ranking: the text outside the spans, each
    span replaced by `` [LABEL] `` (overlapping spans: each label, the text they cover once)."""
    out, at = [], 0
    for span in sorted(document.spans, key=lambda s: (s["start"], s["end"])):
        if span["start"] > at:
            out.append(document.text[at:span["start"]])
        out.append(f" [{span['label']}] ")
        at = max(at, span["end"])
    out.append(document.text[at:])
    return "".join(out)


@dataclass(frozen=True)
class Index:
    """BM25 over the public versions of one tenant's confirmed documents (``versions``: their
    (id, version) in id order, what the index was built from)."""

    versions: tuple[tuple[str, str], ...]
    tokenizer: Any
    model: Any

    @classmethod
    def build(cls, documents: Sequence[StoredDocument]) -> Index:
        try:
            import bm25s
            from bm25s.tokenization import Tokenizer
        except ImportError:
            raise MissingDependencyError("retrieval for /v1/ask needs bm25s: pip install 'tokendp[serve]'") from None
        versions = tuple((d.id, d.version) for d in documents)
        if not documents:
            return cls(versions, None, None)
        tokenizer = Tokenizer(stopwords=STOPWORDS)
        ids = tokenizer.tokenize([public_version(d) for d in documents], update_vocab=True, return_as="ids",
                                 show_progress=False)
        model = bm25s.BM25()
        model.index(ids, show_progress=False)
        return cls(versions, tokenizer, model)

    def top(self, question: str, k: int) -> list[str]:
        """The ids of the ``k`` best documents of score > 0, by (-score, id)."""
        if self.model is None:
            return []
        vocab = self.tokenizer.get_vocab_dict()
        words = self.tokenizer.tokenize([question], update_vocab=False, return_as="string", show_progress=False)[0]
        terms = [vocab[w] for w in words if w and w in vocab]  # "" stands for an empty text: never a term
        if not terms:
            return []
        scores = self.model.get_scores(terms)
        ranked = sorted(range(len(self.versions)), key=lambda i: (-float(scores[i]), self.versions[i][0]))
        return [self.versions[i][0] for i in ranked if scores[i] > 0][:k]


class Retriever:
    """The tenants' indexes (module docstring); safe to call from several threads."""

    def __init__(self, vault: VaultStore) -> None:
        self.vault = vault
        self._indexes: dict[str, Index] = {}
        self._lock = threading.Lock()

    def search(self, tenant: Tenant, question: str, k: int) -> list[str]:
        """The ids of the documents ``question`` reads: at most ``k``, best first."""
        versions = tuple(self.vault.confirmed_versions(tenant))
        with self._lock:
            index = self._indexes.get(tenant.name)
            if index is None or index.versions != versions:
                index = self._indexes[tenant.name] = Index.build(self.vault.confirmed(tenant))
            return index.top(question, k)
