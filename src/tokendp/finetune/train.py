"""The fine-tuning loop: no DP, DP-SGD or ATDP, one loop, resumable.

Per step t (DP methods): Opacus draws a Poisson sample of the records (each with probability
q = batch_size / N, ``UniformWithReplacementSampler``), computes per-record gradients of

    L_i = (1 / n_i) sum_t w_{i,t} CE_{i,t}        (n_i: tokens predicted in record i)

(``GradSampleModule``), clips each to norm C and adds N(0, (sigma_t C)^2) noise (``DPOptimizer``);
then AdamW. Before the noisy step is taken, the :class:`~tokendp.accounting.ledger.Ledger`
charges a ``SubsampledGaussianEvent(q, sigma_t)`` with the sigma the optimiser is about to use,
check then commit, against the schedule's RDP epsilon (so no step beyond the plan is taken).
sigma_t = sigma_0 m_e (:mod:`tokendp.accounting.dpsgd`), all fixed before the first step.
Opacus's RDP accountant records the same steps and must agree with the ledger at the end (a
disagreement raises rather than report a wrong epsilon). The certified epsilon is the plan's
accountant (PLD by default, or RDP) applied to the steps the ledger charged (:meth:`Trainer.epsilon`).

``none``: the same loss with every weight 1, shuffled batches of ``batch_size``, plain AdamW.

Resumable: every ``checkpoint_every`` steps the trainable weights, optimiser, ledger and step are
saved to ``OUT/.checkpoint.pt``; a rerun continues. The states of the generators that draw the
Poisson sample and the noise are saved only when ``keep_generator_states`` (a run seeded for
reproduction): otherwise a resumed run draws fresh OS-seeded randomness, so a checkpoint never
holds what would let its reader predict the noise or the sample of the steps after it.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tokendp.accounting import INTEGER_ORDERS, Ledger, SubsampledGaussianEvent
from tokendp.errors import TokenDPError
from tokendp.finetune.data import Record, pad_batch

CHECKPOINT = ".checkpoint.pt"
UNIT = "record"


@dataclass(frozen=True)
class Plan:
    """Everything public that fixes the run before its first step."""

    private: bool
    epochs: int
    steps_per_epoch: int
    batch_size: int
    sampling_rate: float
    sigmas: tuple[float, ...]  # one per step (empty without DP)
    clip_norm: float
    lr: float
    epsilon_budget: float | None  # the ledger's: the schedule's RDP epsilon
    delta: float | None
    accountant: str = "rdp"  # the certificate's accountant ("pld" or "rdp")

    @property
    def steps(self) -> int:
        return self.epochs * self.steps_per_epoch


@dataclass
class Progress:
    step: int
    steps: int
    loss: float
    epsilon: float | None
    elapsed: float


def weighted_loss(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean over records of (1/n_i) sum_t w_{i,t} CE_{i,t}: the per-record losses are what
    Opacus differentiates and clips one by one (loss_reduction="mean")."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits  # (B, L, V)
    targets = batch["input_ids"][:, 1:]  # (B, L-1)
    ce = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2).float(), targets, reduction="none")  # (B, L-1)
    predicted = batch["attention_mask"][:, 1:].float()  # (B, L-1)
    per_record = (ce * batch["weights"]).sum(1) / predicted.sum(1).clamp_min(1.0)  # (B,)
    return per_record.mean()


def _save(path: Path, state: dict) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def _trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def _zero_grad_samples(params: Sequence[torch.nn.Parameter]) -> None:
    """An empty Poisson sample: zero-size per-sample gradients, so the step still adds its noise
    (and is charged) like every other step."""
    for p in params:
        p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype, device=p.device)


class Trainer:
    """Runs a :class:`Plan` on ``model`` (already LoRA-wrapped or full) over ``records``."""

    def __init__(self, model: torch.nn.Module, records: Sequence[Record], plan: Plan, *, pad_id: int, workdir: Path,
                 data_generator: torch.Generator, noise_generator: torch.Generator | None, grad_sample_mode: str = "hooks",
                 checkpoint_every: int = 200, keep_generator_states: bool = True) -> None:
        self.plan, self.records, self.pad_id = plan, list(records), pad_id
        self.workdir, self.checkpoint_every = workdir, checkpoint_every
        self.data_generator = data_generator
        self.keep_generator_states = keep_generator_states
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer: Any = torch.optim.AdamW(self.params, lr=plan.lr, weight_decay=0.0)
        self.ledger: Ledger | None = None
        self.accountant: Any = None
        self.step = 0
        self.elapsed = 0.0
        self._shown: tuple[int, float] | None = None  # (step, epsilon) last shown in the progress
        if plan.private:
            from opacus import GradSampleModule
            from opacus.accountants import RDPAccountant
            from opacus.optimizers import DPOptimizer

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # Opacus on modules it reads through functorch
                self.model = GradSampleModule(model, batch_first=True, loss_reduction="mean",
                                              force_functorch=grad_sample_mode == "functorch")
            self.optimizer = DPOptimizer(self.optimizer, noise_multiplier=plan.sigmas[0], max_grad_norm=plan.clip_norm,
                                         expected_batch_size=plan.batch_size, loss_reduction="mean",
                                         generator=noise_generator)
            self.accountant = RDPAccountant()
            self.optimizer.attach_step_hook(self.accountant.get_optimizer_hook_fn(sample_rate=plan.sampling_rate))
            self.ledger = Ledger({UNIT: plan.epsilon_budget}, delta=plan.delta, orders=INTEGER_ORDERS)
        self.noise_generator = noise_generator

    # --- checkpoints ---------------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        optimizer = self.optimizer.original_optimizer if self.plan.private else self.optimizer
        return {"step": self.step, "elapsed": self.elapsed, "params": _trainable_state(self._base()),
                "optimizer": optimizer.state_dict(),
                "data_generator": self.data_generator.get_state() if self.keep_generator_states else None,
                "noise_generator": (self.noise_generator.get_state()
                                    if self.noise_generator is not None and self.keep_generator_states else None),
                "ledger": None if self.ledger is None else self.ledger.state_dict(),
                "accountant": None if self.accountant is None else list(self.accountant.history)}

    def _base(self) -> torch.nn.Module:
        return self.model._module if self.plan.private else self.model

    def resume(self) -> bool:
        path = self.workdir / CHECKPOINT
        if not path.is_file():
            return False
        state = torch.load(path, map_location="cpu", weights_only=False)
        named = dict(self._base().named_parameters())
        with torch.no_grad():
            for name, value in state["params"].items():
                named[name].copy_(value)
        optimizer = self.optimizer.original_optimizer if self.plan.private else self.optimizer
        optimizer.load_state_dict(state["optimizer"])
        if state["data_generator"] is not None:
            self.data_generator.set_state(state["data_generator"])
        if self.noise_generator is not None and state["noise_generator"] is not None:
            self.noise_generator.set_state(state["noise_generator"])
        if self.ledger is not None:
            self.ledger.load_state_dict(state["ledger"])
            self.accountant.history = [tuple(h) for h in state["accountant"]]
        self.step, self.elapsed = int(state["step"]), float(state["elapsed"])
        return True

    def checkpoint(self) -> None:
        _save(self.workdir / CHECKPOINT, self._state())

    # --- batches -------------------------------------------------------------------------------
    def _epoch_batches(self, skip: int) -> Iterator[list[int]]:
        """Index lists of the current epoch's remaining steps. DP: Opacus's Poisson sampler, one
        draw from the data generator per step (so a checkpoint's generator state is the next
        step's). Without DP: a shuffled partition, the same for the epoch on resumption."""
        n, plan = len(self.records), self.plan
        if plan.private:
            from opacus.utils.uniform_sampler import UniformWithReplacementSampler

            sampler = UniformWithReplacementSampler(num_samples=n, sample_rate=plan.sampling_rate,
                                                    generator=self.data_generator, steps=plan.steps_per_epoch - skip)
            return (list(b) for b in sampler)
        epoch = torch.Generator().manual_seed(self.data_generator.initial_seed() + self.step // plan.steps_per_epoch)
        order = torch.randperm(n, generator=epoch).tolist()
        batches = [order[i:i + plan.batch_size] for i in range(0, n, plan.batch_size)][:plan.steps_per_epoch]
        return iter(batches[skip:])

    # --- the loop ------------------------------------------------------------------------------
    def run(self, on_step: Callable[[Progress], None] | None = None) -> None:
        plan = self.plan
        self.model.train()
        while self.step < plan.steps:
            in_epoch = self.step % plan.steps_per_epoch
            for indices in self._epoch_batches(in_epoch):
                start = time.monotonic()
                loss = self._one_step(indices)
                self.step += 1
                self.elapsed += time.monotonic() - start
                if on_step is not None:
                    on_step(Progress(self.step, plan.steps, loss, self._progress_epsilon(), self.elapsed))
                if self.step % self.checkpoint_every == 0 and self.step < plan.steps:
                    self.checkpoint()
        self.model.eval()
        if self.ledger is not None:
            self._check_against_opacus()

    def _one_step(self, indices: list[int]) -> float:
        plan = self.plan
        if indices:
            batch = pad_batch([self.records[i] for i in indices], self.pad_id)
            loss = weighted_loss(self.model, batch)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # Opacus's full backward hooks on frozen inputs
                loss.backward()
            value = float(loss.detach())
        else:
            _zero_grad_samples(self.params)
            value = math.nan
        if plan.private:
            sigma = plan.sigmas[self.step]
            self.optimizer.noise_multiplier = sigma  # Opacus adds N(0, (sigma C)^2) with this value
            self.ledger.charge({UNIT: SubsampledGaussianEvent(sampling_rate=plan.sampling_rate, noise_multiplier=sigma)})
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return value

    def epsilon(self) -> float | None:
        """The certified epsilon of the steps charged so far, by the plan's accountant (None
        without DP): the PLD of the ledger's events, or the ledger's own RDP epsilon."""
        if self.ledger is None:
            return None
        if self.plan.accountant == "rdp":
            return self.ledger.epsilon(UNIT)
        from tokendp.accounting import dp_sgd_pld_epsilon

        events = self.ledger.events(UNIT)
        if not events:
            return 0.0
        sigmas = [e.noise_multiplier for e, n in events.items() for _ in range(n)]
        return dp_sgd_pld_epsilon(sampling_rate=self.plan.sampling_rate, noise_multipliers=sigmas, delta=self.plan.delta)

    def _progress_epsilon(self) -> float | None:
        """The epsilon shown while training: exact with RDP (the ledger's, cheap); with the PLD
        (a fraction of a second per call) refreshed about every 2% of the run and at its end."""
        if self.ledger is None or self.plan.accountant == "rdp":
            return self.epsilon()
        every = max(1, self.plan.steps // 50)
        if self._shown is None or self.step - self._shown[0] >= every or self.step == self.plan.steps:
            self._shown = (self.step, self.epsilon())
        return self._shown[1]

    def _check_against_opacus(self) -> None:
        """The ledger's epsilon and Opacus's RDP accountant's, at the same orders, must agree."""
        ours = self.ledger.epsilon(UNIT)
        theirs = self.accountant.get_epsilon(delta=self.plan.delta, alphas=list(INTEGER_ORDERS))
        if not math.isclose(ours, theirs, rel_tol=1e-6, abs_tol=1e-9):
            raise TokenDPError(f"internal accounting mismatch: ledger epsilon {ours:.6g}, Opacus RDP accountant {theirs:.6g}; "
                               "the model is not released")
