"""`tokendp synthesize`: JSON records, the clip of `tokendp account`, --out, errors -> exit 2."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import tinylm
from tokendp.cli import main
from tokendp.cli._exit import EXIT_BAD_INPUT

KEYS = {"text", "epsilon", "clip", "rho", "batch_size", "max_tokens", "topk_plus_mean", "delta", "method",
        "temperature", "top_k", "tokens_generated", "stop_reason", "references", "model", "svt_epsilon",
        "max_private_tokens", "switch_threshold", "private_tokens", "max_reference_tokens", "references_per_text",
        "max_new_tokens", "deprecated_keys"}


@pytest.fixture()
def refs(tmp_path):
    path = tmp_path / "refs.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in tinylm.CORPUS) + "\n")
    return path


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_json_records_and_clip_equal_to_tokendp_account(refs):
    model = tinylm.model_dir()
    res = run("synthesize", "--references", refs, "--epsilon", 3, "--delta", 1e-5, "--references-per-text", 2,
              "--max-new-tokens", 4, "--temperature", 0.9, "--top-k", 20, "--seed", 0, "--model", model, "--domain", "a note", "--json")
    assert res.exit_code == 0, res.output
    records = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(records) == 2  # 5 references in disjoint batches of 2
    assert all(set(r) == KEYS for r in records)
    assert [r["references"] for r in records] == [[0, 1], [2, 3]]
    account = run("account", "invisibleink", "--epsilon", 3, "--delta", 1e-5, "--references-per-text", 2,
                  "--temperature", 0.9, "--max-new-tokens", 4, "--json")
    certificate = json.loads(account.stdout)
    for r in records:
        assert r["clip"] == certificate["clip"] and r["epsilon"] == certificate["epsilon"]
        assert (r["references_per_text"], r["max_new_tokens"], r["top_k"]) == (2, 4, 20)
        assert (r["batch_size"], r["max_tokens"]) == (2, 4) and set(r["deprecated_keys"]) == {"batch_size", "max_tokens"}


def test_amin_switch_end_to_end_matches_tokendp_account(refs):
    res = run("synthesize", "--references", refs, "--epsilon", 3, "--delta", 1e-5, "--references-per-text", 2,
              "--max-new-tokens", 6, "--method", "amin", "--svt-epsilon", 0.5, "--max-private-tokens", 2,
              "--seed", 0, "--model", tinylm.model_dir(), "--domain", "a note", "--json")
    assert res.exit_code == 0, res.output
    records = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(records) == 2 and all(set(r) == KEYS for r in records)
    account = run("account", "amin", "--epsilon", 3, "--delta", 1e-5, "--references-per-text", 2, "--temperature", 1.0,
                  "--max-new-tokens", 6, "--svt-epsilon", 0.5, "--max-private-tokens", 2, "--json")
    assert account.exit_code == 0, account.output
    certificate = json.loads(account.stdout)
    for r in records:
        assert r["clip"] == certificate["clip"] and r["epsilon"] == certificate["epsilon"]
        assert (r["svt_epsilon"], r["max_private_tokens"], r["switch_threshold"]) == (0.5, 2, r["clip"])
        assert 0 <= r["private_tokens"] <= 2
    readable = run("synthesize", "--references", refs, "--epsilon", 3, "--delta", 1e-5, "--references-per-text", 5,
                   "--max-new-tokens", 4, "--method", "amin", "--svt-epsilon", 0.5, "--switch-threshold", 0.25,
                   "--seed", 0, "--model", tinylm.model_dir(), "--domain", "a note")
    assert readable.exit_code == 0, readable.output
    assert "switch: svt epsilon 0.5, threshold 0.25" in readable.stdout and "of at most 1 tokens private" in readable.stdout


def test_out_file_readable_output_and_epsilon_zero(refs, tmp_path):
    out = tmp_path / "synthetic.txt"
    res = run("synthesize", "--references", refs, "--epsilon", 0, "--delta", 1e-5, "--references-per-text", 5,
              "--max-new-tokens", 3, "--method", "amin", "--model", tinylm.model_dir(), "--domain", "a note", "--out", out)
    assert res.exit_code == 0, res.output
    assert res.stdout == ""
    assert out.read_text().startswith("# amin: epsilon 0 per reference")


@pytest.mark.parametrize("args, message", [
    (["--num", 3], "at most 2"),
    (["--temperature", 0], "temperature"),
    (["--delta", 2], "delta"),
    (["--svt-epsilon", 0.5], "belongs to method 'amin'"),
    (["--method", "amin", "--max-private-tokens", 1], "pass svt_epsilon"),
    (["--method", "amin", "--svt-epsilon", 0.5, "--max-private-tokens", 3], "from 1 to max_tokens"),
    (["--method", "amin", "--svt-epsilon", 5], "switch alone"),
])
def test_errors_exit_2_with_a_message(refs, args, message):
    base = {"--epsilon": 1, "--delta": 1e-5, "--references-per-text": 2, "--max-new-tokens": 2}
    base.update(dict(zip(args[::2], args[1::2])))
    res = run("synthesize", "--references", refs, "--model", tinylm.model_dir(), "--domain", "a note", *sum(map(list, base.items()), []))
    assert res.exit_code == 2 and message in res.output


def test_malformed_references_exit_2_without_their_text(tmp_path):
    path = tmp_path / "refs.jsonl"
    path.write_text('{"text": "fine"}\n{"note": "SECRET-NAME"}\n')
    res = run("synthesize", "--references", path, "--epsilon", 1, "--delta", 1e-5, "--references-per-text", 1,
              "--max-new-tokens", 2, "--model", tinylm.model_dir(), "--domain", "a note")
    assert res.exit_code == EXIT_BAD_INPUT and "line 2" in res.output and "SECRET" not in res.output


def test_without_a_domain_the_prompt_pair_refuses_with_a_message(refs):
    res = run("synthesize", "--references", refs, "--epsilon", 1, "--delta", 1e-5, "--references-per-text", 2,
              "--max-new-tokens", 2, "--model", tinylm.model_dir())
    assert res.exit_code == 2 and "--domain" in res.output and "hospital discharge note" in res.output
