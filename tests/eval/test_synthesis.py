"""`evaluate_synthesis` plumbing on a tiny model: settings, what each one reads, the cache, features."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tinylm
from tokendp.backends import HFBackend
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.eval import synthesis
from tokendp.eval.mauve import featurize, mauve_score, on_topic_share
from tokendp.eval.synthesis import SynthEvalConfig, evaluate_synthesis, settings, tab_paragraphs

REFS = [f"Case {i}: the applicant was detained in cell {i} for {i} days." for i in range(12)]
HELD = [f"Held-out case {i}: the court found a violation of Article {i}." for i in range(10)]
OFF = [f"Recipe {i}: stir {i} eggs into the flour." for i in range(4)]


@pytest.fixture(scope="module")
def backend():
    return HFBackend(tinylm.model(), tinylm.tokenizer(chat=True))


def _config(**change):
    base = dict(model="tiny", epsilons=(1.0, 10.0), amin_epsilons=(10.0,), num=3, batch_size=2, max_tokens=3,
                domain="a court case", buckets=2, mauve_seeds=2)
    return SynthEvalConfig(**(base | change))


class Spy:
    def __init__(self, backend, monkeypatch):
        self.rows = []
        real = backend.prefill

        def prefill(sequences, **kwargs):
            self.rows += [[backend.tokenizer.decode(list(r.ids)) for r in seq.rows] for seq in sequences]
            return real(sequences, **kwargs)

        monkeypatch.setattr(backend, "prefill", prefill)


def test_rows_cover_every_setting_and_resume_from_the_cache(backend, tmp_path, monkeypatch):
    spy = Spy(backend, monkeypatch)
    rows = evaluate_synthesis(_config(), REFS, HELD, tmp_path, off_topic=OFF, backend=backend, progress=False)
    assert [r["setting"] for r in rows] == ["real", "non-private", "invisibleink-eps10", "invisibleink-eps1",
                                           "amin-eps10", "public", "off-topic"]
    by = {r["setting"]: r for r in rows}
    assert by["real"]["epsilon"] is None and by["off-topic"]["epsilon"] is None and by["public"]["epsilon"] == 0.0
    assert by["real"]["ended"] is None and by["off-topic"]["ended"] is None and 0 <= by["public"]["ended"] <= 1
    assert 9.99 < by["invisibleink-eps10"]["epsilon"] <= 10 and 0.99 < by["amin-eps10"]["epsilon"] <= 10
    for r in rows:
        assert 0 <= r["mauve"] <= 1 and r["mauve_std"] >= 0 and 0 <= r["on_topic"] <= 1
        assert r["texts"] == 3 and r["held_out"] == len(HELD)
    assert by["real"]["words"] == np.mean([len(t.split()) for t in REFS[:3]])
    assert by["off-topic"]["words"] == np.mean([len(t.split()) for t in OFF[:3]])
    # non-private: one row per text, its own reference; private settings: 1 + B rows, disjoint batches
    one_row = [r for r in spy.rows if len(r) == 1]
    assert len(one_row) == 3 and all(REFS[i] in one_row[i][0] for i in range(3))
    private = [r for r in spy.rows if len(r) == 3]
    assert len(private) == 3 * 3  # three private settings of three texts
    for rows_ in private:
        assert not any(ref in rows_[0] for ref in REFS + HELD)  # the public row reads no text
    assert not any(h in row for rows_ in spy.rows for row in rows_ for h in HELD + OFF)  # nothing reads them

    def boom(*args, **kwargs):
        raise AssertionError("a cached setting was generated again")

    monkeypatch.setattr(synthesis, "_chunk_texts", boom)
    again = evaluate_synthesis(_config(), REFS, HELD, tmp_path, off_topic=OFF, backend=backend, progress=False)
    assert [r["mauve"] for r in again] == [r["mauve"] for r in rows]


def test_a_killed_run_keeps_its_finished_chunks(backend, tmp_path, monkeypatch):
    real = synthesis._chunk_texts
    calls = []

    def stop_at_the_second(*args, **kwargs):
        calls.append(args[0].name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(synthesis, "CHUNK", 2)
    monkeypatch.setattr(synthesis, "_chunk_texts", stop_at_the_second)
    with pytest.raises(KeyboardInterrupt):
        evaluate_synthesis(_config(), REFS, HELD, tmp_path, backend=backend, progress=False)
    assert calls == ["non-private", "non-private"]
    files = {p.stem: p for p in tmp_path.glob("cache/*/*.jsonl")}
    assert {k: len(p.read_text().splitlines()) for k, p in files.items()} == {"non-private": 2}
    first = files["non-private"].read_text().splitlines()
    monkeypatch.setattr(synthesis, "_chunk_texts", real)
    evaluate_synthesis(_config(), REFS, HELD, tmp_path, backend=backend, progress=False)
    assert files["non-private"].read_text().splitlines()[:2] == first  # resumed, not redone


def test_settings_and_checks():
    assert [s.name for s in settings(_config(epsilons=(3.0,), amin_epsilons=()))] == \
        ["non-private", "invisibleink-eps3", "public"]
    with pytest.raises(InvalidInputError, match="need 8 references"):
        evaluate_synthesis(_config(num=4, batch_size=2), REFS[:7], HELD, "unused", backend=object())
    with pytest.raises(InvalidParameterError, match="finite number > 0"):
        evaluate_synthesis(_config(epsilons=(0.0,)), REFS, HELD, "unused", backend=object())
    with pytest.raises(InvalidInputError, match="off-topic"):
        evaluate_synthesis(_config(), REFS, HELD, "unused", off_topic=OFF[:2], backend=object())


def test_features_do_not_depend_on_the_batch(backend):
    texts = ["short one", "a much longer text than the first one, with more tokens in it", ""]
    together = featurize(backend.model, backend.tokenizer, texts, max_tokens=6, batch_size=3)
    alone = np.concatenate([featurize(backend.model, backend.tokenizer, [t], max_tokens=6) for t in texts])
    assert together.shape == (3, backend.model.config.hidden_size) and together.dtype == np.float32
    np.testing.assert_allclose(together, alone, rtol=1e-4, atol=1e-5)
    cut = featurize(backend.model, backend.tokenizer, [texts[1] + " and then some more words"], max_tokens=6)
    np.testing.assert_allclose(cut[0], together[1], rtol=1e-4, atol=1e-5)  # only the first T tokens count


def test_mauve_and_on_topic_on_known_clouds():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(60, 8)), rng.normal(size=(60, 8))
    far = rng.normal(size=(60, 8)) + 10.0
    assert mauve_score(a, b, buckets=4, seeds=[1, 2])[0] > 0.9
    assert mauve_score(a, far, buckets=4, seeds=[1, 2])[0] < 0.1
    topic = np.ones((50, 8)) + 0.1 * rng.normal(size=(50, 8))
    assert on_topic_share(topic, topic) >= 0.94
    assert on_topic_share(-topic, topic) == 0.0


def test_tab_paragraphs_split_and_length(tmp_path):
    texts = {"a": "x" * 250 + "\nshort\n" + "y" * 300, "b": "z" * 260, "c": "w" * 600}
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    (tmp_path / "gold_spans.json").write_text(json.dumps({k: [] for k in texts}))
    tune = tab_paragraphs(tmp_path, "tune")  # documents a and c
    assert sorted(len(p) for p in tune) == [250, 300]
    assert tab_paragraphs(tmp_path, "report") == ["z" * 260]
