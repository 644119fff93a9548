"""benchmarks/filter_asr.py: the filter at epsilon/2 paired with the fixed accounting at epsilon, on
the documents both have done, and the rule's noise (issue 44)."""

import json
import math

import pytest

from repo_scripts import load_script

filter_asr = load_script("benchmarks/filter_asr.py")


def _record(path, doc, loss, mink, nll=10.0, tokens=10):
    path.mkdir(parents=True, exist_ok=True)
    attacks = {"PERSON": {"loss": loss, "mink": mink}, "CODE": {"loss": 0.0, "mink": 0.0}}
    (path / f"{doc}.json").write_text(json.dumps({"doc": doc, "nll": nll, "tokens": tokens, "released_tokens": 8,
                                                  "attacks": attacks}))


def test_pairs_fixed_at_epsilon_with_the_filter_at_half_on_shared_documents(tmp_path):
    cache = tmp_path / "cache" / "abc123"
    for doc in ("a", "b", "c"):
        _record(cache / "dp-fusion__eps-8", doc, loss=0.0, mink=0.0, nll=12.0)
        _record(cache / "public__-", doc, loss=0.2, mink=0.2)
    for doc in ("a", "b"):  # the filter has not done "c" yet
        _record(cache / "dp-fusion-filter__eps-4", doc, loss=1.0, mink=0.5, nll=11.0)
    _record(cache / "dp-fusion__eps-16", "a", loss=0.0, mink=0.0)  # no filter at 8: not paired
    (row,) = filter_asr.pairs(filter_asr.load_records(tmp_path))
    assert row["epsilon"] == 8 and row["documents"] == 2 and row["games"] == 4
    assert row["fixed"]["loss"] == 0.0 and row["filter"]["loss"] == 0.5 and row["filter"]["mink"] == 0.25
    assert row["public"]["loss"] == pytest.approx(0.1)
    assert row["loss_noise"] == pytest.approx(2 * math.sqrt(2 * 0.25 * 0.75 / 4))
    assert not row["loss_higher_beyond_noise"]  # +0.5 over 4 games is within 0.61
    assert row["ppl_filter_at_or_below"] and row["fixed"]["ppl"] == pytest.approx(math.exp(1.2))
    assert row["filter"]["released_share"] == pytest.approx(0.8)


def test_a_clear_excess_is_beyond_the_noise(tmp_path):
    cache = tmp_path / "cache" / "abc123"
    for doc in map(str, range(40)):
        _record(cache / "dp-fusion__eps-4", doc, loss=0.0, mink=0.0)
        _record(cache / "dp-fusion-filter__eps-2", doc, loss=1.0, mink=0.0)
    (row,) = filter_asr.pairs(filter_asr.load_records(tmp_path))
    assert row["loss_higher_beyond_noise"] and not row["mink_higher_beyond_noise"]
