"""tokendp finetune: the plan and its epsilon, ATDP's weights, resume, exported model, bad input."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

import tinylm
from tokendp import accounting
from tokendp.errors import InvalidInputError, InvalidParameterError

pytest.importorskip("opacus")

from tokendp.jobs.finetune import FinetuneConfig, finetune  # noqa: E402
from tokendp.jobs.finetune.data import build_records, paper_weight, token_weights  # noqa: E402
from tokendp.jobs.finetune.train import weighted_loss  # noqa: E402
from tokendp.text.spans import Span  # noqa: E402

SECRET = "Zebulon Quartermaine"  # a "private" string that must never reach a message or report
TEXTS = [f"{tinylm.CORPUS[i % len(tinylm.CORPUS)]} {SECRET} {i}" for i in range(24)]


class HandTagger:
    name = "hand"

    def tag(self, text):
        start = text.find(SECRET)
        return [Span(start, start + len(SECRET), "PERSON")] if start >= 0 else []


def _pos(words):
    return ["NOUN"] * len(words)


def _run(tmp_path, name="out", **overrides):
    settings = {"method": "atdp", "epochs": 2, "batch_size": 6, "lora_r": 0, "epsilon": 8.0, "noise_seed": 3,
                "canaries": 1, "canary_repeats": 2, "gamma": 0.5, "ceiling": 3.0, "jitter": 0.1, **overrides}
    return finetune(texts=TEXTS, out=tmp_path / name, model=str(tinylm.model_dir()), config=FinetuneConfig(**settings),
                    tagger=HandTagger(), pos=_pos)


def test_atdp_run_reports_its_schedule_and_a_loadable_model(tmp_path):
    report = _run(tmp_path)
    privacy = report["privacy"]
    assert report["records"] == len(TEXTS) + 2 and report["steps"] == 2 * report["steps_per_epoch"]
    sigmas = privacy["sigma_per_epoch"]
    assert sigmas[0] == privacy["noise_multiplier"] and sigmas[1] > sigmas[0]  # the schedule rises
    expected = accounting.schedule_epsilon(noise_multiplier=sigmas[0], multipliers=[s / sigmas[0] for s in sigmas],
                                           steps_per_epoch=report["steps_per_epoch"], sampling_rate=privacy["sampling_rate"],
                                           delta=1e-5)
    assert privacy["epsilon"] == pytest.approx(expected, rel=1e-9) and privacy["epsilon"] <= 8.0
    # the certificate names its accountant (the PLD by default); the ledger's looser RDP bound is beside it
    assert privacy["accountant"] == "pld" and privacy["accountant_method"].startswith("PLD")
    rdp = accounting.schedule_epsilon(noise_multiplier=sigmas[0], multipliers=[s / sigmas[0] for s in sigmas],
                                      steps_per_epoch=report["steps_per_epoch"], sampling_rate=privacy["sampling_rate"],
                                      delta=1e-5, accountant="rdp")
    assert privacy["epsilon_rdp"] == pytest.approx(rdp, rel=1e-9) and privacy["epsilon_rdp"] > privacy["epsilon"]
    assert report["atdp"]["tier"] == "high-entity"
    out = tmp_path / "out"
    saved = json.loads((out / "finetune.json").read_text())
    assert saved == json.loads(json.dumps(report)) and SECRET not in (out / "finetune.json").read_text()
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.vocab_size == tinylm.model().config.vocab_size
    assert (out / "canaries.json").is_file() and not (out / ".checkpoint.pt").exists()


def test_lora_run_merges_the_adapter(tmp_path):
    report = _run(tmp_path, method="dpsgd", lora_r=2, canaries=0)
    assert report["lora"]["merged"] and report["privacy"]["sigma_per_epoch"][0] == report["privacy"]["sigma_per_epoch"][1]
    from transformers import AutoModelForCausalLM

    names = [n for n, _ in AutoModelForCausalLM.from_pretrained(tmp_path / "out").named_parameters()]
    assert not any("lora" in n for n in names)
    assert (tmp_path / "out" / "adapter" / "adapter_config.json").is_file()  # the adapter alone, PEFT's layout


def test_resume_after_an_interruption_reaches_the_same_epsilon(tmp_path):
    class Stop(Exception):
        pass

    def stop_at_three(progress):
        if progress.step == 3:
            raise Stop

    settings = {"method": "dpsgd", "epochs": 2, "batch_size": 6, "lora_r": 0, "epsilon": 5.0, "noise_seed": 1,
                "checkpoint_every": 1}
    with pytest.raises(Stop):
        finetune(texts=TEXTS, out=tmp_path / "r", model=str(tinylm.model_dir()), config=FinetuneConfig(**settings),
                 on_progress=stop_at_three)
    assert (tmp_path / "r" / ".checkpoint.pt").is_file()
    seen = []
    report = finetune(texts=TEXTS, out=tmp_path / "r", model=str(tinylm.model_dir()), config=FinetuneConfig(**settings),
                      on_progress=lambda p: seen.append(p.step))
    assert seen[0] == 3 and report["steps"] == 2 * report["steps_per_epoch"]
    assert report["privacy"]["epsilon"] == accounting.dp_sgd_pld_epsilon(
        sampling_rate=report["privacy"]["sampling_rate"], noise_multipliers=[report["privacy"]["noise_multiplier"]] * report["steps"],
        delta=1e-5)
    with pytest.raises(InvalidInputError, match="other data or settings"):
        finetune(texts=TEXTS[:-1], out=tmp_path / "r", model=str(tinylm.model_dir()), config=FinetuneConfig(**settings))


def test_checkpoints_never_hold_the_privacy_randomness(tmp_path):
    class Stop(Exception):
        pass

    def stop(progress):
        if progress.step == 2:
            raise Stop

    config = FinetuneConfig(method="dpsgd", epochs=1, batch_size=6, lora_r=0, epsilon=5.0, checkpoint_every=1)
    with pytest.raises(Stop):
        finetune(texts=TEXTS, out=tmp_path / "s", model=str(tinylm.model_dir()), config=config, on_progress=stop)
    state = torch.load(tmp_path / "s" / ".checkpoint.pt", weights_only=False)
    assert state["step"] == 1 and state["data_generator"] is None and state["noise_generator"] is None
    report = finetune(texts=TEXTS, out=tmp_path / "s", model=str(tinylm.model_dir()), config=config)
    assert report["steps"] == report["steps_per_epoch"] and report["privacy"]["epsilon"] <= 5.0


def test_bad_input_fails_before_training(tmp_path):
    base = str(tinylm.model_dir())
    with pytest.raises(InvalidInputError, match="no records"):
        finetune(texts=[], out=tmp_path / "a", model=base, config=FinetuneConfig(method="none", lora_r=0))
    with pytest.raises(InvalidInputError, match="record 2 has .* tokens") as err:
        finetune(texts=["short text", SECRET * 40], out=tmp_path / "b", model=base,
                 config=FinetuneConfig(method="none", lora_r=0, max_length=32))
    assert SECRET not in str(err.value)
    with pytest.raises(InvalidParameterError, match="unreachable"):
        finetune(texts=TEXTS, out=tmp_path / "c", model=base,
                 config=FinetuneConfig(method="dpsgd", lora_r=0, epsilon=1e-4, delta=1e-9, batch_size=24, epochs=400))
    assert not (tmp_path / "c" / ".checkpoint.pt").exists()
    with pytest.raises(InvalidParameterError, match="exactly one"):
        FinetuneConfig(method="dpsgd").check()
    with pytest.raises(InvalidParameterError, match="accountant"):
        FinetuneConfig(method="dpsgd", epsilon=3.0, accountant="prv").check()


def test_steps_and_truncate(tmp_path):
    """--steps S is one pass of S Poisson-sampled steps, accounted as such (here by the RDP
    accountant, which calibrates and certifies alike); --truncate keeps a long record's first
    tokens as one record instead of refusing it."""
    base = str(tinylm.model_dir())
    texts = [*TEXTS, SECRET * 40]
    config = FinetuneConfig(method="dpsgd", steps=5, batch_size=6, lora_r=0, epsilon=4.0, max_length=32, truncate=True,
                            accountant="rdp")
    report = finetune(texts=texts, out=tmp_path / "s", model=base, config=config)
    privacy = report["privacy"]
    assert report["steps"] == report["steps_per_epoch"] == 5 and report["training"]["epochs"] == 1
    assert report["training"]["truncate"] and privacy["sampling_rate"] == 6 / len(texts)
    assert privacy["epsilon"] == pytest.approx(accounting.dp_sgd_epsilon(
        sampling_rate=6 / len(texts), noise_multipliers=[privacy["noise_multiplier"]] * 5, delta=1e-5), rel=1e-9)
    assert privacy["epsilon"] <= 4.0 and privacy["accountant"] == "rdp" and privacy["epsilon_rdp"] == privacy["epsilon"]
    long = build_records([SECRET * 40], tinylm.tokenizer(), max_length=32, truncate=True)[0]
    assert len(long.ids) == len(long.weights) == 32
    again = finetune(texts=texts, out=tmp_path / "s", model=base, config=config,
                     on_progress=lambda p: pytest.fail("a finished run trained again"))
    assert again == json.loads(json.dumps(report))  # the finished run's report, nothing retrained
    with pytest.raises(InvalidParameterError, match="not both"):
        FinetuneConfig(method="none", epochs=2, steps=3).check()
    with pytest.raises(InvalidParameterError, match="more than one pass"):
        finetune(texts=TEXTS, out=tmp_path / "n", model=base, config=FinetuneConfig(method="none", lora_r=0, steps=9, batch_size=6))


def test_weights_mark_sensitive_tokens_and_w_one_is_the_plain_loss():
    tok = tinylm.tokenizer()
    text = TEXTS[0]
    start = text.find(SECRET)
    record = build_records([text], tok, max_length=512, weight=0.25,
                           detect=lambda t: [Span(start, start + len(SECRET), "PERSON")])[0]
    offsets = tok(text, return_offsets_mapping=True)["offset_mapping"]
    marked = [tok.decode([i]) for i, w in zip(record.ids, record.weights) if w == 1.0]
    assert "".join(marked).strip().startswith("Zeb") and set(record.weights) == {1.0, 0.25}
    assert token_weights(offsets, [], 0.5) == (0.5,) * len(offsets)
    model = tinylm.model()
    plain = build_records([text], tok, max_length=512)
    from tokendp.jobs.finetune.data import pad_batch

    batch = pad_batch(plain, 0)
    with torch.no_grad():
        ours = weighted_loss(model, batch)
        reference = model(input_ids=batch["input_ids"], labels=batch["input_ids"]).loss
    assert float(ours) == pytest.approx(float(reference), rel=1e-5)
    assert paper_weight(target=0.5, fraction=0.1) == pytest.approx(0.1 * 0.5 / (0.5 * 0.9))
    with pytest.raises(InvalidParameterError):
        paper_weight(target=1.0, fraction=0.1)


def test_cli_finetune_json_and_eval_exposure(tmp_path):
    from tokendp.cli import main

    data = tmp_path / "corpus.jsonl"
    data.write_text("\n".join(json.dumps({"text": t}) for t in TEXTS) + "\n")
    runner = CliRunner()
    result = runner.invoke(main, ["finetune", "--data", str(data), "--method", "dpsgd", "--out", str(tmp_path / "m"),
                                  "--model", str(tinylm.model_dir()), "--epsilon", "6", "--epochs", "1", "--expected-batch-size", "6",
                                  "--lora-r", "0", "--canaries", "2", "--canary-repeats", "2", "--noise-seed", "0", "--json",
                                  "--accountant", "rdp"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout[result.stdout.index("{"):])
    assert report["privacy"]["epsilon"] <= 6.0 and report["privacy"]["accountant"] == "rdp"
    result = runner.invoke(main, ["eval", "exposure", "--model", str(tmp_path / "m"), "--canaries",
                                  str(tmp_path / "m" / "canaries.json"), "--samples", "50", "--json"])
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)["canaries"]
    assert len(found) == 2 and all(0 <= e["low"] <= e["high"] <= 19.94 and 0 <= e["exposure"] <= 19.94 for e in found)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    result = runner.invoke(main, ["finetune", "--data", str(empty), "--method", "none", "--out", str(tmp_path / "e"),
                                  "--model", str(tinylm.model_dir()), "--lora-r", "0"])
    assert result.exit_code == 3 and "no records" in result.output  # bad input (tokendp.cli._exit)


def test_cli_finetune_quiet_shows_no_progress_bars(tmp_path, transformers_bars):
    """-q means no progress bars: not the CLI's, nor transformers' "Loading weights" and
    "Writing model shards" when finetune loads and saves the model."""
    from tokendp.cli import main

    data = tmp_path / "corpus.jsonl"
    data.write_text("\n".join(json.dumps({"text": t}) for t in TEXTS[:4]) + "\n")
    result = CliRunner().invoke(main, ["finetune", "-q", "--json", "--data", str(data), "--method", "none", "--out",
                                       str(tmp_path / "m"), "--model", str(tinylm.model_dir()), "--lora-r", "0",
                                       "--steps", "1", "--expected-batch-size", "2"])
    assert result.exit_code == 0, result.output
    assert result.stderr == "" and json.loads(result.stdout)["steps"] == 1


def test_cli_eval_finetune_writes_the_table(tmp_path):
    from tokendp.cli import main

    data = tmp_path / "wikitext"
    data.mkdir()
    body = " = Title = \n" + "\n".join(f" {t} . It was fine . " for t in tinylm.CORPUS * 3) + "\n"
    (data / "train.txt").write_text(body)
    (data / "valid.txt").write_text(body)
    result = CliRunner().invoke(main, ["eval", "finetune", "--data", str(data), "--out", str(tmp_path / "cmp"), "--model",
                                       str(tinylm.model_dir()), "--records", "8", "--valid", "4", "--max-length", "40",
                                       "--epsilons", "8", "--tiers", "low-entity", "--epochs", "1", "--expected-batch-size", "4",
                                       "--canaries", "1", "--canary-repeats", "1", "--samples", "20"])
    assert result.exit_code == 0, result.output
    table = (tmp_path / "cmp" / "results.md").read_text()
    assert all(name in table for name in ("| base (not fine-tuned) |", "| none |", "| dpsgd-eps8 |", "| atdp-low-entity-eps8 |"))
    rows = json.loads((tmp_path / "cmp" / "results.json").read_text())["rows"]
    assert all(r["epsilon"] is None or r["epsilon"] <= 8.0 for r in rows)


def test_a_same_sized_corpus_with_other_text_never_resumes_the_run(tmp_path):
    """The checkpoint is taken up by the run's fingerprint (a hash of every record and the
    settings), not by the number of records; the refusal names no record."""
    class Stop(Exception):
        pass

    def stop(progress):
        if progress.step == 2:
            raise Stop

    settings = {"method": "dpsgd", "epochs": 1, "batch_size": 6, "lora_r": 0, "epsilon": 5.0, "noise_seed": 1,
                "checkpoint_every": 1}
    base = str(tinylm.model_dir())
    with pytest.raises(Stop):
        finetune(texts=TEXTS, out=tmp_path / "r", model=base, config=FinetuneConfig(**settings), on_progress=stop)
    state = torch.load(tmp_path / "r" / ".checkpoint.pt", weights_only=False)
    assert state["format"] == "tokendp.checkpoint/1" and len(state["fingerprint"]) == 64
    other = [t.replace(SECRET, "Ottoline Featherstonehaugh") for t in TEXTS]
    assert len(other) == len(TEXTS)
    with pytest.raises(InvalidInputError, match="other data or settings") as err:
        finetune(texts=other, out=tmp_path / "r", model=base, config=FinetuneConfig(**settings),
                 on_progress=lambda p: pytest.fail("trained on from another corpus's checkpoint"))
    assert "Ottoline" not in str(err.value) and SECRET not in str(err.value)
    report = finetune(texts=TEXTS, out=tmp_path / "r", model=base, config=FinetuneConfig(**settings))
    assert report["steps"] == report["steps_per_epoch"]
    assert not (tmp_path / "r" / ".checkpoint.pt").exists()
    assert not any(state["fingerprint"] in p.read_text(errors="ignore") for p in (tmp_path / "r").rglob("*.json"))
