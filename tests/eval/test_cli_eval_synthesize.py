"""`tokendp eval synthesize`: registered, JSON rows on a tiny model, clear errors (exit 2)."""

from __future__ import annotations

import json

from click.testing import CliRunner

import tinylm
from tokendp.cli import main


def _jsonl(path, texts):
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return str(path)


def test_help_lists_the_options():
    result = CliRunner().invoke(main, ["eval", "synthesize", "--help"])
    assert result.exit_code == 0
    for option in ("--data", "--references", "--held-out", "--epsilon", "--amin-epsilon", "--domain", "--buckets",
                   "--out"):
        assert option in result.output


def test_json_rows_on_a_tiny_model(tmp_path):
    refs = _jsonl(tmp_path / "refs.jsonl", tinylm.CORPUS * 2)
    held = _jsonl(tmp_path / "held.jsonl", tinylm.CORPUS)
    args = ["eval", "synthesize", "--references", refs, "--held-out", held, "--model", str(tinylm.model_dir()), "--domain", "a note",
            "--epsilon", "2", "--amin-epsilon", "", "--num", "2", "--references-per-text", "2", "--max-new-tokens", "2",
            "--buckets", "2", "--mauve-seeds", "1", "--out", str(tmp_path / "out"), "--no-plots", "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout[result.stdout.index("["):])
    assert [r["setting"] for r in rows] == ["real", "non-private", "invisibleink-eps2", "public"]
    assert (tmp_path / "out" / "results.md").read_text().count("\n| ") == 5  # header + 4 settings


def test_input_and_parameter_errors_exit_2(tmp_path):
    out = ["--out", str(tmp_path / "out"), "--no-plots"]
    neither = CliRunner().invoke(main, ["eval", "synthesize", *out])
    assert neither.exit_code == 2 and "--data" in neither.output
    refs = _jsonl(tmp_path / "refs.jsonl", tinylm.CORPUS)
    bad = CliRunner().invoke(main, ["eval", "synthesize", "--references", refs, "--held-out", refs,
                                    "--amin-epsilon", "ten", *out])
    assert bad.exit_code == 2 and "--amin-epsilon" in bad.output
