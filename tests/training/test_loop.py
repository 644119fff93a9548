"""tokendp.training: the run fingerprint, the checkpoint format, the resumable loop, the progress bar."""

from __future__ import annotations

import io
import math

import pytest
import torch

from tokendp.errors import InvalidInputError
from tokendp.training import (CHECKPOINT_FORMAT, Progress, ProgressBar, ResumableLoop, check_run, fingerprint,
                              load_checkpoint, save_checkpoint)

SETTINGS = {"lr": 0.1, "steps": 6, "seed": 3}
DATA = ["alpha beta", "gamma delta", "epsilon zeta"]


def test_fingerprint_is_a_content_hash_of_data_and_settings():
    base = fingerprint(data=DATA, settings=SETTINGS)
    assert base == fingerprint(data=list(DATA), settings=dict(reversed(SETTINGS.items())))  # key order is not content
    assert len(base) == 64 and int(base, 16) >= 0
    same_size_other_text = ["alpha beta", "gamma delta", "epsilon zetA"]
    others = [
        fingerprint(data=same_size_other_text, settings=SETTINGS),
        fingerprint(data=DATA[::-1], settings=SETTINGS),  # order
        fingerprint(data=DATA[:2], settings=SETTINGS),  # number
        fingerprint(data=["alpha", "beta gamma delta", "epsilon zeta"], settings=SETTINGS),  # boundaries
        fingerprint(data=DATA, settings={**SETTINGS, "lr": 0.2}),
        fingerprint(data=[[1, 2], [3]], settings=SETTINGS),
    ]
    assert len({base, *others}) == 1 + len(others)
    assert fingerprint(data=[[1, 2], [3]], settings=SETTINGS) != fingerprint(data=[[1], [2, 3]], settings=SETTINGS)


def test_check_run_claims_a_directory_for_one_run(tmp_path):
    run = fingerprint(data=DATA, settings=SETTINGS)
    check_run(tmp_path / "out", run)
    check_run(tmp_path / "out", run)  # the same run again: fine
    with pytest.raises(InvalidInputError, match="other data or settings") as err:
        check_run(tmp_path / "out", fingerprint(data=["alpha beta", "gamma delta", "epsilon zetA"], settings=SETTINGS))
    assert "zet" not in str(err.value)


def test_checkpoint_format_and_refusals(tmp_path):
    path = tmp_path / "ckpt.pt"
    assert load_checkpoint(path, run="a") is None
    save_checkpoint(path, run="a", step=4, elapsed=1.5, model={"w": torch.ones(2)}, optimizer={"state": {}},
                    extra={"sampler": [1, 2]})
    state = load_checkpoint(path, run="a")
    assert state["format"] == CHECKPOINT_FORMAT and state["step"] == 4 and state["sampler"] == [1, 2]
    assert state["scheduler"] is None and torch.equal(state["model"]["w"], torch.ones(2))
    assert not list(tmp_path.glob("*.tmp"))
    with pytest.raises(InvalidInputError, match="other data or settings"):
        load_checkpoint(path, run="b")
    torch.save({"step": 3}, tmp_path / "old.pt")
    with pytest.raises(InvalidInputError, match="not a tokendp checkpoint"):
        load_checkpoint(tmp_path / "old.pt", run="a")
    (tmp_path / "cut.pt").write_bytes(path.read_bytes()[:40])
    with pytest.raises(InvalidInputError, match="not a readable checkpoint"):
        load_checkpoint(tmp_path / "cut.pt", run="a")
    with pytest.raises(ValueError, match="reserved"):
        save_checkpoint(path, run="a", step=1, elapsed=0, model={}, optimizer={}, extra={"step": 2})


class _Job:
    """A tiny regression trained by the loop, with a sampler whose state goes in the checkpoint."""

    def __init__(self, path, run, *, checkpoint_every=2, steps=6):
        torch.manual_seed(0)
        self.model = torch.nn.Linear(3, 1)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=0.05)
        self.sched = torch.optim.lr_scheduler.StepLR(self.opt, step_size=2, gamma=0.5)
        self.sampler = torch.Generator().manual_seed(7)
        self.x, self.y = torch.randn(16, 3, generator=torch.Generator().manual_seed(1)), torch.randn(16, 1)
        self.loop = ResumableLoop(model=self.model, optimizer=self.opt, scheduler=self.sched, steps=steps,
                                  checkpoint=path, run=run, checkpoint_every=checkpoint_every,
                                  save_extra=lambda: {"sampler": self.sampler.get_state()},
                                  load_extra=lambda s: self.sampler.set_state(s["sampler"]))

    def step(self, t):
        pick = torch.randint(16, (4,), generator=self.sampler)
        loss = ((self.model(self.x[pick]) - self.y[pick]) ** 2).mean()
        loss.backward()
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad()
        return float(loss.detach()), {"lr": self.sched.get_last_lr()[0]}


def test_an_interrupted_run_resumes_to_the_uninterrupted_result(tmp_path):
    run = fingerprint(data=DATA, settings=SETTINGS)
    full = _Job(tmp_path / "full.pt", run)
    seen = []
    full.loop.run(full.step, seen.append)
    assert [p.step for p in seen] == [1, 2, 3, 4, 5, 6] and all(p.steps == 6 for p in seen)
    assert all(math.isfinite(p.loss) and p.elapsed >= 0 and "lr" in p.metrics for p in seen)

    class Stop(Exception):
        pass

    def stop_at_five(p):
        if p.step == 5:
            raise Stop

    part = _Job(tmp_path / "part.pt", run)
    with pytest.raises(Stop):
        part.loop.run(part.step, stop_at_five)
    assert torch.load(tmp_path / "part.pt", weights_only=False)["step"] == 4  # the last checkpoint
    again = _Job(tmp_path / "part.pt", run)
    assert again.loop.resume() and again.loop.step == 4
    resumed = []
    again.loop.run(again.step, resumed.append)
    assert [p.step for p in resumed] == [5, 6]
    for a, b in zip(full.model.parameters(), again.model.parameters()):
        assert torch.equal(a, b)
    assert resumed[-1].metrics["lr"] == seen[-1].metrics["lr"]
    # the same-sized data with other text: the checkpoint is refused, nothing is loaded
    other = _Job(tmp_path / "part.pt", fingerprint(data=["alpha beta", "gamma delta", "epsilon zetA"], settings=SETTINGS))
    with pytest.raises(InvalidInputError, match="other data or settings"):
        other.loop.resume()
    assert other.loop.step == 0


def test_checkpoint_at_end_and_the_hook(tmp_path):
    run = fingerprint(data=DATA, settings=SETTINGS)
    saved = []
    job = _Job(tmp_path / "c.pt", run, checkpoint_every=4, steps=5)
    job.loop.on_checkpoint = saved.append
    job.loop.checkpoint_at_end = True
    job.loop.run(job.step)
    assert saved == [4, 5] and torch.load(tmp_path / "c.pt", weights_only=False)["step"] == 5


def test_a_checkpoint_of_another_model_is_refused(tmp_path):
    run = fingerprint(data=DATA, settings=SETTINGS)
    job = _Job(tmp_path / "c.pt", run)
    job.loop.save()
    other = torch.nn.Linear(4, 1)
    loop = ResumableLoop(model=torch.nn.Sequential(other), optimizer=torch.optim.AdamW(other.parameters()), steps=2,
                         checkpoint=tmp_path / "c.pt", run=run, checkpoint_every=1)
    with pytest.raises(InvalidInputError, match="does not fit this model"):
        loop.resume()


def test_progress_bar_shows_counts_and_numbers_only():
    out = io.StringIO()
    with ProgressBar("train", file=out, mininterval=0) as bar:
        bar(Progress(1, 4, 2.5, 0.1, {"epsilon": 0.25}, "shard 1/2"))
        bar(Progress(3, 4, math.nan, 0.2, {}, ""))
        bar.describe("saving")
    text = out.getvalue()
    assert "train: shard 1/2" in text and "loss=2.500" in text and "eps=0.25" in text and "3/4" in text
    assert Progress(1, 2, 0.0, 0.0, {"epsilon": 1}).epsilon == 1.0 and Progress(1, 2, 0.0, 0.0).epsilon is None
