"""benchmarks/step_7b.py runs (a CPU smoke test of the 7B-shaped benchmark at a tiny scale),
so that a GPU session can run it at full scale (docs/performance.md, issue 27)."""

from __future__ import annotations
from repo_scripts import load_script


def _bench():
    return load_script("benchmarks/step_7b.py")


def test_the_full_config_is_qwen25_7b_instruct():
    cfg = _bench().QWEN25_7B
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
            cfg["intermediate_size"], cfg["vocab_size"]) == (3584, 28, 28, 4, 18944, 152064)
    assert cfg["hidden_size"] // cfg["num_attention_heads"] == 128 and not cfg["tie_word_embeddings"]


def test_documents_differ_from_the_public_row_in_their_own_spans_only():
    rows = _bench().documents(2, 3, 64, 100)[0]
    public = rows[0]
    assert len(rows) == 4 and all(len(r) == 64 for r in rows)
    changed = [{j for j, (a, b) in enumerate(zip(public, r)) if a != b} for r in rows[1:]]
    assert all(changed) and not (changed[0] & changed[1])  # spans of different groups (up to overlaps)
    assert all(public[j] == 3 for c in changed for j in c)  # placeholders in the public row


def test_small_scale_runs_and_reports_every_ratio(capsys):
    result = _bench().main(["--scale", "small", "--layers", "2", "--threads", "1", "--batch", "3",
                            "--groups", "2", "--new-tokens", "3", "--prompt-tokens", "24"])
    assert result["config"]["num_hidden_layers"] == 2 and result["rows"] == 9
    for key in ("ratio_tokendp_over_passes", "ratio_tokendp_over_forward", "step_share_of_pass", "tokens_per_second"):
        assert result[key] > 0
    assert '"tokens_per_second"' in capsys.readouterr().out


def _reference_bench():
    return load_script("benchmarks/reference_dpfusion.py")


def test_the_reference_benchmark_skips_cleanly_without_dp_fusion_lib(monkeypatch, capsys):
    bench = _reference_bench()
    monkeypatch.setattr(bench, "reference_module", lambda: None)
    assert set(bench.main(["--model", "small"])) == {"skipped"}
    assert '"skipped"' in capsys.readouterr().out


def test_the_reference_benchmark_runs_where_dp_fusion_lib_is_installed():
    import pytest

    pytest.importorskip("dp_fusion_lib")
    result = _reference_bench().main(["--model", "small", "--layers", "1", "--threads", "1", "--docs", "2",
                                      "--groups", "2", "--prompt-tokens", "16", "--new-tokens", "3", "--repeats", "1"])
    assert result["ratio_tokendp_one_over_reference"] > 0
