"""tokendp.predict: PMixED over an ensemble of LoRA adapters, with a budget of T tokens fixed up front."""

from __future__ import annotations

import json

import pytest
import torch

import tinylm
import tokendp
from tokendp.accounting import pmixed_alpha, pmixed_beta, pmixed_epsilon
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.jobs.predict import load_ensemble, predict, prompt_rows

PROMPTS = ["The court held", "Dear Dr Helen"]


@pytest.fixture(scope="module")
def ens():
    return tinylm.ensemble_dir(3)


@pytest.fixture(scope="module")
def backend(ens):
    return load_ensemble(ens)[1]


def test_prompt_rows_are_public_then_one_per_member():
    seq = prompt_rows([5, 6], ["shard-000", "shard-001"])
    assert [r.adapter for r in seq.rows] == [None, "shard-000", "shard-001"]
    assert len({r.ids for r in seq.rows}) == 1


def test_predict_reports_public_parameters_and_spends_the_budget(ens, backend):
    res = predict(PROMPTS, ensemble=ens, backend=backend, queries=12, epsilon=8, delta=1e-5, sample_rate=0.5,
                  max_new_tokens=4, seed=0)
    rep = res.report
    alpha = pmixed_alpha(epsilon=8, ensemble_size=3, sample_rate=0.5, max_tokens=12, delta=1e-5)  # chosen: public only
    beta = pmixed_beta(epsilon=8, alpha=alpha, ensemble_size=3, sample_rate=0.5, max_tokens=12, delta=1e-5)
    assert rep.alpha == alpha and rep.beta == beta and rep.ensemble_size == 3 and rep.queries == 12
    assert rep.epsilon == pmixed_epsilon(alpha=alpha, beta=beta, ensemble_size=3, sample_rate=0.5, max_tokens=12,
                                         delta=1e-5) <= 8
    assert [a.index for a in res.answers] == [0, 1] and all(1 <= len(a.token_ids) <= 4 for a in res.answers)
    assert rep.tokens_released == sum(len(a.token_ids) + (a.stop_reason == "eos") for a in res.answers)
    assert res.stopped is None
    d = rep.to_dict()
    assert set(d["epsilon_per_shard"]) == {"shard-000", "shard-001", "shard-002"}
    assert "diagnostics" not in d and "diagnostics" not in res.to_dict() and res.diagnostics is None
    json.dumps(res.to_dict())
    asked = predict(PROMPTS, ensemble=ens, backend=backend, queries=12, epsilon=8, delta=1e-5, sample_rate=0.5,
                    max_new_tokens=4, seed=0, diagnostics=True)
    assert asked.to_dict() == res.to_dict()  # the release does not change
    assert "NOT part of the privacy guarantee" in asked.diagnostics["note"]
    assert 0 <= asked.diagnostics["mean_sampled_members"] <= 3


def test_predict_is_reproducible_with_a_seed_and_beta_mode(ens, backend):
    a = predict("The court held", ensemble=ens, backend=backend, queries=5, beta=0.5, delta=1e-5, seed=3)
    b = tokendp.predict("The court held", ensemble=ens, backend=backend, queries=5, beta=0.5, delta=1e-5, seed=3)
    assert a.answers == b.answers and a.report.beta == 0.5


def test_beta_zero_is_the_public_model(ens, backend, monkeypatch):
    """beta = 0 mixes every member fully into the public row: each step's distribution is the
    base model's (row 0), and epsilon is 0."""
    import tokendp.jobs.predict as mod

    real, checked = mod._Job.step, []

    def spy(self, logits, docs, temperature):
        out = real(self, logits, docs, temperature)
        public = torch.log_softmax(logits[:, 0].double() / temperature, -1)  # (Na, V)
        torch.testing.assert_close(out.logprobs.double(), public, atol=1e-5, rtol=0)
        checked.append(1)
        return out

    monkeypatch.setattr(mod._Job, "step", spy)
    res = predict("The court held", ensemble=ens, backend=backend, queries=4, beta=0.0, delta=1e-5, seed=1)
    assert res.report.epsilon == 0.0 and len(checked) == len(res.answers[0].token_ids) + (res.answers[0].stop_reason == "eos")


def test_budget_exhausted_stops_cleanly_with_released_tokens(ens, backend):
    res = predict(PROMPTS * 2, ensemble=ens, backend=backend, queries=3, epsilon=8, delta=1e-5, seed=0, concurrency=2)
    assert res.report.tokens_released <= 3
    assert res.stopped is not None and "budget exhausted" in res.stopped
    reasons = [a.stop_reason for a in res.answers]
    assert reasons[2:] == ["not_started", "not_started"] and reasons[0] in ("budget", "eos")
    assert sum(len(a.token_ids) for a in res.answers) <= 3


def test_sequential_prompts_share_the_budget(ens, backend):
    res = predict(["The court", "Dear", "He was"], ensemble=ens, backend=backend, queries=5, beta=0.3, delta=1e-5,
                  seed=4, max_new_tokens=2)
    assert res.report.tokens_released <= 5
    first = [a for a in res.answers if a.stop_reason != "not_started"]
    assert sum(len(a.token_ids) + (a.stop_reason == "eos") for a in first) == res.report.tokens_released
    if res.report.tokens_released == 5:
        assert res.answers[2].stop_reason in ("budget", "eos") and "budget exhausted" in res.stopped
    else:
        assert res.stopped is None


def test_every_token_is_charged_before_release(ens, backend, monkeypatch):
    """The ledger holds exactly T tokens: with one prompt and max_new_tokens = T, T tokens are charged
    and the certified epsilon equals the ledger's."""
    import tokendp.jobs.predict as mod

    seen = {}
    real = mod._Job.charge

    def spy(self, docs):
        real(self, docs)
        seen["eps"] = self.ledger.epsilon("shard-000")
        seen["n"] = self.released

    monkeypatch.setattr(mod._Job, "charge", spy)
    res = predict("Please review", ensemble=ens, backend=backend, queries=4, epsilon=6, delta=1e-5, seed=2)
    assert seen["n"] == res.report.tokens_released <= 4
    if seen["n"] == 4:
        assert seen["eps"] == pytest.approx(res.report.epsilon, rel=1e-9)


@pytest.mark.parametrize("kwargs, err, match", [
    (dict(epsilon=8, beta=0.1), InvalidParameterError, "exactly one"),
    (dict(epsilon=8, sample_rate=0.0), InvalidParameterError, "sample_rate"),
    (dict(epsilon=8, sample_rate=1.5), InvalidParameterError, "sample_rate"),
    (dict(epsilon=8, queries=0), InvalidParameterError, "queries"),
    (dict(epsilon=8, delta=1.0), InvalidParameterError, "delta"),
    (dict(epsilon=8, alpha=1.0), InvalidParameterError, "alpha"),
])
def test_bad_parameters(ens, backend, kwargs, err, match):
    args = dict(ensemble=ens, backend=backend, queries=4, delta=1e-5)
    args.update(kwargs)
    with pytest.raises(err, match=match):
        predict("x y", **args)


def test_bad_inputs(ens, backend, tmp_path):
    with pytest.raises(InvalidInputError, match="no prompts"):
        predict([], ensemble=ens, backend=backend, queries=4, epsilon=8, delta=1e-5)
    with pytest.raises(InvalidInputError, match="prompt 1 is empty"):
        predict(["ok", "  "], ensemble=ens, backend=backend, queries=4, epsilon=8, delta=1e-5)
    with pytest.raises(InvalidInputError, match="not an ensemble directory"):
        predict("ok", ensemble=tmp_path, queries=4, epsilon=8, delta=1e-5)
    import shutil

    broken = tmp_path / "ens"
    shutil.copytree(ens, broken)
    shutil.rmtree(broken / "shard-001")
    with pytest.raises(InvalidInputError, match="unknown adapter.*shard-001"):
        predict("ok", ensemble=broken, queries=4, epsilon=8, delta=1e-5)


def test_a_member_trained_on_nothing_reads_exactly_the_public_row(tmp_path, monkeypatch):
    """The proof's neighbour: a shard without data gives a fresh adapter (B = 0), which is the base
    model; its row must carry the public row's logits bit for bit, not a rounding of them."""
    import copy
    import shutil

    from peft import get_peft_model

    import tokendp.jobs.predict as mod

    ens = tinylm.ensemble_dir(3)
    shutil.rmtree(ens / "shard-001")
    get_peft_model(copy.deepcopy(tinylm.model()), tinylm.lora_config()).save_pretrained(ens / "shard-001")
    manifest, backend = load_ensemble(ens)
    assert backend.zero_adapters() == ("shard-001",)
    seq = prompt_rows([5, 6], manifest.shard_names, backend.zero_adapters())
    assert [r.adapter for r in seq.rows] == [None, "shard-000", None, "shard-002"]
    real, seen = mod._Job.step, []

    def spy(self, logits, docs, temperature):
        assert torch.equal(logits[:, 2], logits[:, 0]) and not torch.equal(logits[:, 1], logits[:, 0])
        seen.append(1)
        return real(self, logits, docs, temperature)

    monkeypatch.setattr(mod._Job, "step", spy)
    predict("The court", ensemble=ens, backend=backend, queries=3, epsilon=8, delta=1e-5, seed=0)
    assert seen
