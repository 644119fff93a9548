"""Continuous batching (issue 27): a finished document's slot is refilled at once, every step
decodes min(slots, documents left) documents, and each document gets what it gets alone.

``generation.generate_continuous`` (the loop), ``HFBackend.join``/``compact`` (the cache),
``fusion.FusionJob.admit``/``run_fusion_stream`` (ledgers per slot) and
``jobs.sanitize.sanitize_stream`` (the reports), on the tiny test model.
"""

from __future__ import annotations

import pytest
import tinylm
import torch

from tokendp import fusion
from tokendp.backends import RowSequence
from tokendp.errors import InvalidParameterError
from tokendp.fusion import Chunk, PreparedFusion, length_order, run_fusion
from tokendp.jobs.config import SanitizeConfig
from tokendp.jobs.sanitize import prepare_sanitize, run_sanitize, sanitize_stream

OPTIONS = {"prompt_template": "<|doc|>{document}<|rewrite|>", "placeholder": "<|mask|>"}
LABELS = ("PERSON", "DATETIME", "LOC")
N = 10


def _texts() -> list[str]:
    """Documents of very different lengths: 1 to 4 sentences, a short one beside long ones."""
    return [" ".join(tinylm.CORPUS[(i + k) % len(tinylm.CORPUS)] for k in range(1 + (7 * i) % 4)) for i in range(N)]


def _spans(i: int) -> list[dict]:
    """1 to 3 spans in 1 to 3 groups (so documents have different m, hence padded group masks)."""
    return [{"start": 12 * k, "end": 12 * k + 4, "label": LABELS[k % (1 + i % 3)]} for k in range(1 + i % 3)]


@pytest.fixture(scope="module")
def backend():
    return tinylm.backend(OPTIONS)


def _prepare(backend, idx, **kw) -> PreparedFusion:
    """Documents ``idx`` prepared; T the default (1.2x the document + 16: it differs per document)
    unless given; epsilon targets, so each document has its own order alpha from its own T."""
    params = {"epsilon": 6.0, **kw}
    return prepare_sanitize([_texts()[i] for i in idx], spans=[_spans(i) for i in idx], model=backend,
                            config=SanitizeConfig(**params))


def _chunks(backend, size: int, **kw) -> list[Chunk]:
    return [Chunk(_prepare(backend, idx, **kw), tuple(idx), tuple(100 + i for i in idx))
            for idx in (list(range(lo, min(lo + size, N))) for lo in range(0, N, size))]


class _Steps:
    """Records, for every decoding step, the documents it decodes and how many documents had
    finished before it (the stream's results consumed so far)."""

    def __init__(self, monkeypatch) -> None:
        self.sizes, self.finished_before, self.done = [], [], 0
        step = fusion.FusionJob.step

        def counted(job, logits, docs, temperature):
            self.sizes.append(int(logits.shape[0]))
            self.finished_before.append(self.done)
            return step(job, logits, docs, temperature)

        monkeypatch.setattr(fusion.FusionJob, "step", counted)


def test_batch_stays_full_until_the_corpus_runs_out(backend, monkeypatch):
    steps = _Steps(monkeypatch)
    results = {}
    for key, res in sanitize_stream(_chunks(backend, 3, max_new_tokens=None), slots=3):
        results[key] = res
        steps.done += 1
    assert sorted(results) == list(range(N))
    # every step decodes every document not finished, up to the slots: none waits for a batchmate
    assert steps.sizes == [min(3, N - f) for f in steps.finished_before]
    sampled = [r.report.tokens_generated + (r.report.stop_reason == "eos") for r in results.values()]  # EOS too
    assert sum(steps.sizes) == sum(sampled)
    lengths = set(sampled)
    assert max(lengths) > 3 * min(lengths)  # the corpus does have very different lengths

    continuous = list(steps.sizes)
    static = _Steps(monkeypatch)
    for idx in (range(lo, min(lo + 3, N)) for lo in range(0, N, 3)):
        run_sanitize(_prepare(backend, list(idx), max_new_tokens=None), seed=[100 + i for i in idx])
    assert sum(static.sizes) == sum(continuous)  # the same tokens ...
    assert len(static.sizes) > len(continuous)  # ... in fewer, fuller steps
    assert min(static.sizes[:-1]) < 3


def test_each_document_gets_what_it_gets_alone(backend, monkeypatch):
    """Text, report (certificate, T, tokens, stop reason) and diagnostics equal decoding the
    document alone with its seed; and its ledger is charged exactly as alone."""
    seated = []
    admit = fusion.FusionJob.admit

    def recording(job, i, doc):
        admit(job, i, doc)
        seated.append((doc, job.ledgers[i]))

    monkeypatch.setattr(fusion.FusionJob, "admit", recording)
    out = dict(sanitize_stream(_chunks(backend, 4), slots=3, diagnostics=True))
    continuous_ledgers = {id(doc): ledger for doc, ledger in seated}
    monkeypatch.setattr(fusion.FusionJob, "admit", admit)
    for i in range(N):
        prepared = _prepare(backend, [i])
        (alone,) = run_sanitize(prepared, seed=[100 + i], diagnostics=True)
        assert out[i].text == alone.text and out[i].report == alone.report, i
        assert out[i].diagnostics.keys() == alone.diagnostics.keys()
        for key in ("mean_lambda", "mean_divergence"):
            assert out[i].diagnostics[key] == pytest.approx(alone.diagnostics[key], rel=1e-5, abs=1e-9)
        job, _ = run_fusion(prepared, seed=[100 + i])
        doc = next(d for d, _ in seated if d.context == prepared.documents[0].context)
        mine = continuous_ledgers[id(doc)]
        if job.ledgers[0] is None:
            assert mine is None
            continue
        assert mine.state_dict() == job.ledgers[0].state_dict()
        assert all(mine.epsilon(g.label) <= g.epsilon for g in doc.groups)  # never above the certificate
    assert len(seated) == N  # one fresh ledger per document


def test_output_does_not_depend_on_slots_or_chunks(backend):
    runs = [dict(sanitize_stream(_chunks(backend, c, max_new_tokens=12), slots=s)) for s, c in ((1, 1), (4, 2), (6, 6))]
    for i in range(N):
        assert runs[0][i].to_dict() == runs[1][i].to_dict() == runs[2][i].to_dict()


def test_methods_without_a_mechanism_and_streaming(backend):
    tokens: dict[int, list[int]] = {}
    chunks = _chunks(backend, 5, max_new_tokens=8, method="original", temperature=0.7)
    out = dict(sanitize_stream(chunks, slots=2, on_token=lambda key, tok: tokens.setdefault(key, []).append(tok)))
    for i in range(N):
        (alone,) = run_sanitize(_prepare(backend, [i], max_new_tokens=8, method="original", temperature=0.7),
                                seed=[100 + i])
        assert out[i].to_dict() == alone.to_dict()
        assert len(tokens[i]) == alone.report.tokens_generated


def test_chunks_must_share_settings(backend):
    first = _chunks(backend, 5, max_new_tokens=4)[0]
    other = Chunk(_prepare(backend, [7], max_new_tokens=4, temperature=0.5), (7,), (1,))
    with pytest.raises(ValueError, match="settings"):
        list(sanitize_stream([first, other], slots=5))
    with pytest.raises(InvalidParameterError, match="slots"):
        list(sanitize_stream([first], slots=0))
    assert list(sanitize_stream([], slots=2)) == []


def test_length_order_is_by_public_bucket_then_input_order(backend):
    docs = _prepare(backend, list(range(N)), max_new_tokens=4).documents
    lengths = [fusion.document_rows("dp-fusion", d.context).layout_length for d in docs]
    order = length_order("dp-fusion", docs, 16)
    assert sorted(order) == list(range(N))
    keys = [(lengths[i] // 16, i) for i in order]
    assert keys == sorted(keys)
    assert length_order("dp-fusion", docs, 10 ** 6) == list(range(N))
    with pytest.raises(InvalidParameterError):
        length_order("dp-fusion", docs, 0)


def test_join_and_compact_keep_every_row_as_it_was(backend):
    """Rows prefilled apart and joined get the logits they get alone, through decoding, and
    after the longer rows leave, the unread leading positions are dropped."""
    long = RowSequence.from_ids([list(range(5, 40)), list(range(6, 41))])
    short = RowSequence.from_ids([[7, 8, 9]])
    a, la = backend.prefill([long])
    b, lb = backend.prefill([short])
    joined = backend.join(a, b)
    assert joined.attention_mask.shape == (3, 35) and joined.rows_per_sequence == (2, 1)
    assert joined.row_sequence.tolist() == [0, 0, 1] and joined.next_position.tolist() == [35, 35, 3]
    both = backend.decode(joined, torch.tensor([11, 12]))
    alone_a, alone_b = backend.prefill([long])[0], backend.prefill([short])[0]
    torch.testing.assert_close(both[:2], backend.decode(alone_a, torch.tensor([11])), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(both[2:], backend.decode(alone_b, torch.tensor([12])), rtol=1e-5, atol=1e-5)
    kept = backend.keep(joined, torch.tensor([False, True]))
    backend.compact(kept)
    assert kept.attention_mask.shape == (1, 4) and kept.cache.get_seq_length() == 4
    torch.testing.assert_close(backend.decode(kept, torch.tensor([13])),
                               backend.decode(alone_b, torch.tensor([13])), rtol=1e-5, atol=1e-5)
