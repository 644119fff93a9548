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

Resumable: the loop, its checkpoints and the resume are the shared
:class:`~tokendp.training.loop.ResumableLoop`; every ``checkpoint_every`` steps the trainable
weights, optimiser, ledger and step are saved to ``OUT/.checkpoint.pt`` under the run's
fingerprint (a content hash of the corpus and the settings), and a rerun of the same run
continues (another corpus, even of the same size, is refused). The states of the generators that draw the
Poisson sample and the noise are saved only when ``keep_generator_states`` (a run seeded for
reproduction): otherwise a resumed run draws fresh OS-seeded randomness, so a checkpoint never
holds what would let its reader predict the noise or the sample of the steps after it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tokendp.accounting import INTEGER_ORDERS, Ledger, SubsampledGaussianEvent
from tokendp.errors import TokenDPError
from tokendp.jobs.finetune.data import Record, pad_batch
from tokendp.training import Progress, ResumableLoop

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


def weighted_loss(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean over records of (1/n_i) sum_t w_{i,t} CE_{i,t}: the per-record losses are what
    Opacus differentiates and clips one by one (loss_reduction="mean")."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits  # (B, L, V)
    targets = batch["input_ids"][:, 1:]  # (B, L-1)
    ce = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2).float(), targets, reduction="none")  # (B, L-1)
    predicted = batch["attention_mask"][:, 1:].float()  # (B, L-1)
    per_record = (ce * batch["weights"]).sum(1) / predicted.sum(1).clamp_min(1.0)  # (B,)
    return per_record.mean()


def _zero_grad_samples(params: Sequence[torch.nn.Parameter]) -> None:
    """An empty Poisson sample: zero-size per-sample gradients, so the step still adds its noise
    (and is charged) like every other step."""
    for p in params:
        p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype, device=p.device)


class Trainer:
    """Runs a :class:`Plan` on ``model`` (already LoRA-wrapped or full) over ``records``, in the
    shared :class:`~tokendp.training.loop.ResumableLoop` under the run fingerprint ``run``."""

    def __init__(self, model: torch.nn.Module, records: Sequence[Record], plan: Plan, *, pad_id: int, workdir: Path,
                 run: str, data_generator: torch.Generator, noise_generator: torch.Generator | None,
                 grad_sample_mode: str = "hooks", checkpoint_every: int = 200, keep_generator_states: bool = True) -> None:
        self.plan, self.records, self.pad_id = plan, list(records), pad_id
        self.workdir = workdir
        self.data_generator = data_generator
        self.keep_generator_states = keep_generator_states
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer: Any = torch.optim.AdamW(self.params, lr=plan.lr, weight_decay=0.0)
        self.ledger: Ledger | None = None
        self.accountant: Any = None
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
        # The checkpoint holds the plain module's weights and the inner AdamW (not Opacus's wrappers).
        self.loop = ResumableLoop(model=self._base(), optimizer=self.optimizer.original_optimizer if plan.private else self.optimizer,
                                  steps=plan.steps, checkpoint=workdir / CHECKPOINT, run=run,
                                  checkpoint_every=checkpoint_every, save_extra=self._extra, load_extra=self._load_extra)

    @property
    def step(self) -> int:
        return self.loop.step

    @property
    def elapsed(self) -> float:
        return self.loop.elapsed

    # --- checkpoints ---------------------------------------------------------------------------
    def _extra(self) -> dict[str, Any]:
        return {"data_generator": self.data_generator.get_state() if self.keep_generator_states else None,
                "noise_generator": (self.noise_generator.get_state()
                                    if self.noise_generator is not None and self.keep_generator_states else None),
                "ledger": None if self.ledger is None else self.ledger.state_dict(),
                "accountant": None if self.accountant is None else list(self.accountant.history)}

    def _load_extra(self, state: Mapping[str, Any]) -> None:
        if state["data_generator"] is not None:
            self.data_generator.set_state(state["data_generator"])
        if self.noise_generator is not None and state["noise_generator"] is not None:
            self.noise_generator.set_state(state["noise_generator"])
        if self.ledger is not None:
            self.ledger.load_state_dict(state["ledger"])
            self.accountant.history = [tuple(h) for h in state["accountant"]]

    def _base(self) -> torch.nn.Module:
        return self.model._module if self.plan.private else self.model

    def resume(self) -> bool:
        """Continue from ``OUT/.checkpoint.pt`` if it holds this run (another run's is refused)."""
        return self.loop.resume()

    def checkpoint(self) -> None:
        self.loop.save()

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

    def _batches(self) -> Iterator[list[int]]:
        """The batches of every step left, epoch after epoch (each epoch's drawn as it starts)."""
        while self.step < self.plan.steps:
            yield from self._epoch_batches(self.step % self.plan.steps_per_epoch)

    # --- the loop ------------------------------------------------------------------------------
    def run(self, on_step: Callable[[Progress], None] | None = None) -> None:
        batches = self._batches()

        def step(index: int) -> tuple[float, dict[str, float]]:
            loss = self._one_step(next(batches))
            return loss, ({} if self.ledger is None else {"epsilon": self._progress_epsilon(index + 1)})

        self.model.train()
        self.loop.run(step, on_step)
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

    def _progress_epsilon(self, done: int) -> float | None:
        """The epsilon shown after ``done`` steps: exact with RDP (the ledger's, cheap); with the
        PLD (a fraction of a second per call) refreshed about every 2% of the run and at its end."""
        if self.ledger is None or self.plan.accountant == "rdp":
            return self.epsilon()
        every = max(1, self.plan.steps // 50)
        if self._shown is None or done - self._shown[0] >= every or done == self.plan.steps:
            self._shown = (done, self.epsilon())
        return self._shown[1]

    def _check_against_opacus(self) -> None:
        """The ledger's epsilon and Opacus's RDP accountant's, at the same orders, must agree."""
        ours = self.ledger.epsilon(UNIT)
        theirs = self.accountant.get_epsilon(delta=self.plan.delta, alphas=list(INTEGER_ORDERS))
        if not math.isclose(ours, theirs, rel_tol=1e-6, abs_tol=1e-9):
            raise TokenDPError(f"internal accounting mismatch: ledger epsilon {ours:.6g}, Opacus RDP accountant {theirs:.6g}; "
                               "the model is not released")
