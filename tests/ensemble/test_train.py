"""tokendp ensemble train: disjoint shards, group-by, one adapter per shard, resume, the manifest."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

import tinylm
from tokendp.cli import main
from tokendp.cli._exit import EXIT_BAD_INPUT, EXIT_USAGE
from tokendp.ensemble import read_manifest
from tokendp.ensemble.train import TrainConfig, split_shards, train_ensemble
from tokendp.errors import InvalidInputError, InvalidParameterError

SECRET = "Zebulon Quartermaine"  # a "private" string that must never reach a log, error or manifest


def corpus(path, n=9, users=None):
    lines = []
    for i in range(n):
        record = {"text": f"{tinylm.CORPUS[i % len(tinylm.CORPUS)]} {SECRET} {i}"}
        if users:
            record["user_id"] = users[i]
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")
    return path


def _interrupt_after_three_steps(data, out, cfg) -> None:
    """Train one shard into ``out`` and stop it (KeyboardInterrupt) after three steps."""
    calls = []

    def interrupt(n):
        calls.append(n)
        if sum(calls) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_ensemble(data, shards=1, out=out, base=tinylm.model_dir(), seed=0, config=cfg, on_step=interrupt)


def test_split_is_disjoint_deterministic_and_stable():
    texts = [f"record {i}" for i in range(40)]
    parts = split_shards(texts, 3, seed=7)
    assert sorted(i for p in parts for i in p) == list(range(40))
    assert parts == split_shards(texts, 3, seed=7) and parts != split_shards(texts, 3, seed=8)
    # removing one record moves no other record between shards (the per-shard guarantee needs it)
    shard_of = {texts[i]: j for j, p in enumerate(parts) for i in p}
    rest = texts[:5] + texts[6:]
    for j, p in enumerate(split_shards(rest, 3, seed=7)):
        assert all(shard_of[rest[i]] == j for i in p)


def test_group_by_keeps_groups_together_and_in_place():
    groups = ["a", "b", "a", "c", "b", "d", "a", "c", "e", "f"]
    texts = [f"t{i}" for i in range(len(groups))]
    parts = split_shards(texts, 3, seed=0, groups=groups)
    where = {}
    for key in set(groups):
        holding = [j for j, p in enumerate(parts) if any(groups[i] == key for i in p)]
        assert len(holding) == 1
        where[key] = holding[0]
    keep = [i for i, g in enumerate(groups) if g != "a"]  # user "a" leaves: nobody else moves
    for j, p in enumerate(split_shards([texts[i] for i in keep], 3, seed=0, groups=[groups[i] for i in keep])):
        assert all(where[groups[keep[i]]] == j for i in p)
    with pytest.raises(InvalidInputError, match="6 groups, fewer than the 7 shards"):
        split_shards(texts, 7, seed=0, groups=groups)
    with pytest.raises(InvalidInputError, match="3 distinct records, fewer than the 4 shards"):
        split_shards(["x", "y", "z"], 4, seed=0)


def test_train_writes_adapters_and_manifest_and_resumes(tmp_path):
    data = corpus(tmp_path / "c.jsonl", users=["u1", "u2", "u1", "u3", "u2", "u4", "u1", "u3", "u5"])
    out = tmp_path / "ens"
    cfg = TrainConfig(steps=3, batch_size=2, max_length=32, checkpoint_every=2)
    steps = []
    manifest = train_ensemble(data, shards=3, out=out, base=tinylm.model_dir(), seed=1, group_by="user_id",
                              config=cfg, on_step=steps.append)
    assert sum(steps) == 9
    text = (out / "manifest.json").read_text()
    assert SECRET not in text and "u1" not in text
    m = read_manifest(out)
    assert m == manifest and m.ensemble_size == 3 and m.shard_names == ("shard-000", "shard-001", "shard-002")
    assert sum(s.records for s in m.shards) == 9 and all(s.tokens > 0 for s in m.shards)
    assert m.hyperparameters["lora_r"] == 4 and m.hyperparameters["lr"] == 2e-4 and m.hyperparameters["weight_decay"] == 0.01
    assert m.group_by == "user_id" and m.seed == 1
    dirs = m.adapter_dirs(out)
    from safetensors.torch import load_file

    b = [t for k, t in load_file(dirs["shard-000"] / "adapter_model.safetensors").items() if "lora_B" in k]
    assert b and any(t.abs().max() > 0 for t in b)  # trained: B moved away from 0
    cfg_json = json.loads((dirs["shard-000"] / "adapter_config.json").read_text())
    assert cfg_json["r"] == 4 and cfg_json["lora_alpha"] == 32
    # resume: finished shards are skipped, a missing one is trained again
    import shutil

    first = load_file(dirs["shard-001"] / "adapter_model.safetensors")
    shutil.rmtree(out / "shard-001")
    before = (dirs["shard-000"] / "adapter_model.safetensors").stat().st_mtime_ns
    starts = []
    train_ensemble(data, shards=3, out=out, base=tinylm.model_dir(), seed=1, group_by="user_id", config=cfg,
                   on_shard=lambda j, skipped: starts.append((j, skipped)))
    assert starts == [(0, True), (1, False), (2, True)]
    assert (dirs["shard-000"] / "adapter_model.safetensors").stat().st_mtime_ns == before
    # trained alone, shard 1 gets the same adapter as after shard 0 in one run: no shard starts
    # from another shard's weights
    again = load_file(out / "shard-001" / "adapter_model.safetensors")
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)
    with pytest.raises(InvalidInputError, match="other data or settings"):
        train_ensemble(data, shards=3, out=out, base=tinylm.model_dir(), seed=2, group_by="user_id", config=cfg)


def test_checkpoint_inside_a_shard_resumes_to_the_same_adapter(tmp_path):
    """Interrupted after a checkpoint, the rerun ends with the adapter of an uninterrupted run."""
    import tokendp.ensemble.train as train_mod

    data = corpus(tmp_path / "c.jsonl", n=4)
    cfg = TrainConfig(steps=4, batch_size=2, max_length=32, checkpoint_every=2)
    full = tmp_path / "full"
    train_ensemble(data, shards=1, out=full, base=tinylm.model_dir(), seed=0, config=cfg)

    part = tmp_path / "part"
    _interrupt_after_three_steps(data, part, cfg)
    assert (part / ".shard-000.partial" / train_mod.CHECKPOINT).is_file()
    assert not (part / "shard-000").exists()
    resumed = []
    train_ensemble(data, shards=1, out=part, base=tinylm.model_dir(), seed=0, config=cfg, on_step=resumed.append)
    assert resumed[0] == 2 and sum(resumed) == 4  # 2 steps restored from the checkpoint, 2 trained
    from safetensors.torch import load_file

    a = load_file(full / "shard-000" / "adapter_model.safetensors")
    b = load_file(part / "shard-000" / "adapter_model.safetensors")
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert not (part / ".shard-000.partial").exists()


def test_a_same_sized_corpus_with_other_text_is_refused(tmp_path):
    """Same records, groups and token counts, other text: the manifest cannot tell, the fingerprint
    can, both for a finished ensemble and for a shard's checkpoint."""
    import tokendp.ensemble.train as train_mod

    cfg = TrainConfig(steps=4, batch_size=2, max_length=32, checkpoint_every=2)
    data = corpus(tmp_path / "c.jsonl", n=4)
    lines = data.read_text().splitlines()
    other = tmp_path / "o.jsonl"
    other.write_text("\n".join(x.replace(f'{SECRET} {i}"', f'{SECRET} {i + 5}"') for i, x in enumerate(lines)) + "\n")
    assert other.read_text() != data.read_text() and len(other.read_text()) == len(data.read_text())
    out = tmp_path / "ens"
    _interrupt_after_three_steps(data, out, cfg)
    assert (out / ".shard-000.partial" / train_mod.CHECKPOINT).is_file()
    with pytest.raises(InvalidInputError, match="holds a run with other data or settings") as err:
        train_ensemble(other, shards=1, out=out, base=tinylm.model_dir(), seed=0, config=cfg)
    assert SECRET not in str(err.value)
    progress = []
    train_ensemble(data, shards=1, out=out, base=tinylm.model_dir(), seed=0, config=cfg, on_progress=progress.append)
    assert [p.step for p in progress] == [3, 4] and all(p.steps == 4 and p.label == "shard 1/1" for p in progress)
    with pytest.raises(InvalidInputError, match="holds a run with other data or settings"):
        train_ensemble(other, shards=1, out=out, base=tinylm.model_dir(), seed=0, config=cfg)


def test_trained_ensemble_answers_prompts(tmp_path, transformers_bars):
    """-q leaves stderr empty: no bar of the CLI's nor transformers' (loading, saving)."""
    data = corpus(tmp_path / "c.jsonl", n=6)
    out = tmp_path / "ens"
    res = CliRunner().invoke(main, ["ensemble", "train", "-q", "--data", str(data), "--shards", "3", "--out", str(out),
                                    "--model", str(tinylm.model_dir()), "--steps", "2", "--batch-size", "2",
                                    "--max-length", "32", "--seed", "0"])
    assert res.exit_code == 0, res.output
    assert SECRET not in res.output and "3 adapters" in res.stdout and res.stderr == ""
    res = CliRunner().invoke(main, ["predict", "--ensemble", str(out), "--prompt", "The court", "--epsilon", "8",
                                    "--delta", "1e-5", "--queries", "3", "--seed", "0", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["report"]["shards"] == ["shard-000", "shard-001", "shard-002"]


@pytest.mark.parametrize("lines, args, match, code", [
    (['{"text": "a b c"}'] * 2, ["--shards", "3"], "fewer than the 3 shards", EXIT_BAD_INPUT),
    (['{"body": "a b c"}'], ["--shards", "1"], "line 1 has no string field 'text'", EXIT_BAD_INPUT),
    (['not json'], ["--shards", "1"], "line 1 is not valid JSON", EXIT_BAD_INPUT),
    (['{"text": "a b c"}'], ["--shards", "1", "--group-by", "user"], "line 1 has no field 'user'", EXIT_BAD_INPUT),
    (['{"text": "a b c"}'], ["--shards", "0"], "shards must be an integer >= 1", EXIT_USAGE),
    (['{"text": "a b c"}'], ["--shards", "1", "--lr", "-1"], "lr must be", EXIT_USAGE),
])
def test_bad_input_exit_3_and_bad_parameters_2(tmp_path, lines, args, match, code):
    data = tmp_path / "c.jsonl"
    data.write_text("\n".join(lines) + "\n")
    res = CliRunner().invoke(main, ["ensemble", "train", "--data", str(data), "--out", str(tmp_path / "o"),
                                    "--model", str(tinylm.model_dir()), "--steps", "1", *args])
    assert res.exit_code == code and match in res.output, res.output


def test_bad_config():
    with pytest.raises(InvalidParameterError, match="steps"):
        TrainConfig(steps=0).check()


def test_text_corpus_and_a_registered_base_name(tmp_path):
    """A plain-text corpus is one record per non-blank line (WikiText's paragraphs); a registered
    name (tiny, smollm2) is kept as given in the manifest, and predict loads it by that name."""
    data = tmp_path / "train.txt"
    data.write_text("\n".join(f" {line} " for line in tinylm.CORPUS) + "\n \n\n")
    out = tmp_path / "ens"
    res = CliRunner().invoke(main, ["ensemble", "train", "--data", str(data), "--shards", "2", "--out", str(out),
                                    "--model", "tiny", "--steps", "1", "--batch-size", "2", "--max-length", "16"])
    assert res.exit_code == 0, res.output
    m = read_manifest(out)
    assert m.base_model == "tiny" and sum(s.records for s in m.shards) == len(tinylm.CORPUS)
    res = CliRunner().invoke(main, ["predict", "--ensemble", str(out), "--prompt", "The court", "--epsilon", "8",
                                    "--delta", "1e-5", "--queries", "2", "--seed", "0", "--json"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["ensemble", "train", "--data", str(data), "--shards", "2", "--out",
                                    str(tmp_path / "o2"), "--model", "tiny", "--group-by", "user_id"])
    assert res.exit_code == EXIT_BAD_INPUT and "needs a JSONL corpus" in res.output
