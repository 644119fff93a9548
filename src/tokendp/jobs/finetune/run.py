"""``tokendp finetune``: fine-tune a causal LM on a private corpus without DP, with DP-SGD, or
with ATDP, and write a loadable model directory with a report of its guarantee.

Guarantee (``dpsgd``, ``atdp``): (epsilon, delta)-DP per **record** under add/remove of one
record (one JSONL line; each planted canary copy is a record too). It is sample-level: a person
with k records in the corpus is covered only by group privacy (roughly k epsilon, with delta
growing too), so put one person's data in one record, or count k. Proof: docs/privacy.md,
"DP-SGD and ATDP". The output directory holds the merged model (usable as ``--model DIR``),
its tokenizer, ``finetune.json`` (the report: parameters, the realised sigma schedule, epsilon)
and, with canaries, ``canaries.json``.
"""

from __future__ import annotations

import json
import math
import shutil
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.jobs._renamed import renamed_keywords
from tokendp.text.canaries import CanaryFormat, insert_canaries, make_canaries, write_canaries
from tokendp.text.sensitivity import TIERS, check_tier

METHODS: tuple[str, ...] = ("none", "dpsgd", "atdp")
REPORT_FILE = "finetune.json"
CANARY_FILE = "canaries.json"
PLAN_FILE = ".plan.json"
ADAPTER_DIR = "adapter"
FORMAT = "tokendp.finetune/1"
DEFAULT_EPOCHS = 3


@dataclass(frozen=True)
class FinetuneConfig:
    """Every parameter of a run; all public (none is computed from the corpus but its size)."""

    method: str = "atdp"
    epochs: int | None = None  # None: DEFAULT_EPOCHS, or one pass of ``steps`` steps
    batch_size: int = 16
    lr: float = 1e-3
    max_length: int = 256
    steps: int | None = None  # instead of epochs: this many steps in all (one pass)
    truncate: bool = False  # cut a record longer than max_length to its first tokens (still one record)
    lora_r: int = 8
    lora_alpha: float = 16.0
    epsilon: float | None = None
    delta: float = 1e-5
    noise_multiplier: float | None = None
    accountant: str = "pld"  # "pld" (default) or "rdp": the one that calibrates sigma_0 and certifies epsilon
    clip_norm: float = 1.0
    tier: str = "high-entity"
    weight: float = 0.2
    gamma: float = 0.1
    jitter: float = 0.05
    ceiling: float = 1.5
    canaries: int = 0
    canary_repeats: int = 1
    canary_digits: int = 6
    seed: int = 0
    noise_seed: int | None = None
    grad_sample_mode: str = "hooks"
    checkpoint_every: int = 200
    text_field: str = "text"

    def check(self) -> FinetuneConfig:
        if self.method not in METHODS:
            raise InvalidParameterError(f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}")
        check_tier(self.tier)
        if self.epochs is not None and self.steps is not None:
            raise InvalidParameterError("give --epochs or --steps, not both")
        for name in ("batch_size", "max_length", "checkpoint_every"):
            _integer(name, getattr(self, name), 1)
        for name in ("epochs", "steps"):
            if getattr(self, name) is not None:
                _integer(name, getattr(self, name), 1)
        for name in ("lora_r", "canaries", "canary_repeats"):
            _integer(name, getattr(self, name), 0)
        for name in ("lr", "lora_alpha", "clip_norm"):
            _positive(name, getattr(self, name))
        if not 0 < self.weight <= 1:
            raise InvalidParameterError(f"weight must be in (0, 1] (the loss weight of non-sensitive tokens), got {self.weight!r}")
        if self.grad_sample_mode not in ("hooks", "functorch"):
            raise InvalidParameterError(f"grad_sample_mode must be 'hooks' or 'functorch', got {self.grad_sample_mode!r}")
        if self.method != "none":
            if (self.epsilon is None) == (self.noise_multiplier is None):
                raise InvalidParameterError(f"--method {self.method} needs exactly one of --epsilon (with --delta) or --noise-multiplier")
            if self.epsilon is not None:
                _positive("epsilon", self.epsilon)
            if self.noise_multiplier is not None:
                _positive("noise_multiplier", self.noise_multiplier)
            if not 0 < self.delta < 1:
                raise InvalidParameterError(f"delta must lie strictly between 0 and 1, got {self.delta!r}")
            from tokendp.accounting import check_accountant

            check_accountant(self.accountant)
        elif self.epsilon is not None or self.noise_multiplier is not None:
            raise InvalidParameterError("--method none trains without DP: drop --epsilon and --noise-multiplier")
        return self

    @property
    def passes(self) -> int:
        """Epochs of the schedule: ``epochs``, or 1 when the run is given as ``steps``."""
        return 1 if self.steps is not None else (self.epochs or DEFAULT_EPOCHS)


def _integer(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidParameterError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidParameterError(f"{name} must be a finite number > 0, got {value!r}")


# ------------------------------------------------------------------------------- the plan
def make_plan(config: FinetuneConfig, records: int, draws: list[float]) -> dict[str, Any]:
    """The public plan: steps, sampling rate, and for DP the per-epoch multipliers, sigma_0 and
    the epsilon of the whole schedule by ``config.accountant`` (calibrated before training by the
    same accountant; refused if unreachable), with the schedule's RDP epsilon, the budget of the
    step-by-step ledger that guards the run."""
    from tokendp.accounting import calibrate_noise_multiplier, rise_and_reset, schedule_epsilon

    private = config.method != "none"
    q = min(1.0, config.batch_size / records)
    steps_per_epoch = _steps_per_epoch(config, records)
    plan: dict[str, Any] = {"private": private, "records": records, "epochs": config.passes, "steps_per_epoch": steps_per_epoch,
                            "batch_size": config.batch_size, "sampling_rate": q if private else None}
    if not private:
        return plan
    atdp = config.method == "atdp"
    multipliers = rise_and_reset(epochs=config.passes, gamma=config.gamma if atdp else 0.0,
                                            ceiling=config.ceiling if atdp else 1.0, jitter=config.jitter if atdp else 0.0,
                                            draws=draws)
    common = {"multipliers": multipliers, "steps_per_epoch": steps_per_epoch, "sampling_rate": q, "delta": config.delta}
    if config.epsilon is not None:
        sigma0 = calibrate_noise_multiplier(epsilon=config.epsilon, accountant=config.accountant, **common)
    else:
        sigma0 = float(config.noise_multiplier)
    plan.update(noise_multiplier=sigma0, multipliers=multipliers.tolist(),
                sigma_per_epoch=(sigma0 * multipliers).tolist(), accountant=config.accountant,
                epsilon=schedule_epsilon(noise_multiplier=sigma0, accountant=config.accountant, **common),
                epsilon_rdp=schedule_epsilon(noise_multiplier=sigma0, accountant="rdp", **common))
    return plan


def _steps_per_epoch(config: FinetuneConfig, records: int) -> int:
    """Steps of one epoch: ``steps`` when given, else N / batch (rounded for DP's Poisson
    sampling, whose batches are batch-sized on average; every record once without DP). Without
    DP, ``steps`` may not exceed one shuffled pass (use epochs for more)."""
    full = math.ceil(records / config.batch_size)
    if config.steps is None:
        return max(1, round(records / config.batch_size)) if config.method != "none" else full
    if config.method == "none" and config.steps > full:
        raise InvalidParameterError(f"--steps {config.steps} is more than one pass over {records} records in batches of "
                                    f"{config.batch_size} ({full} steps); use --epochs for more than one pass")
    return config.steps


# ------------------------------------------------------------------------------- model
def load_base(base: str, *, device: str | None = None) -> Any:
    """An :class:`~tokendp.backends.hf.HFBackend` of a fresh copy of ``base`` in float32 (a
    registered name or a directory; never the cached copy other jobs share)."""
    from tokendp.backends.hf import HFBackend, load_named_model
    from tokendp.models.registry import is_model_name

    if is_model_name(base):
        return load_named_model(base, device=device, dtype="float32")
    return HFBackend.load(base, device=device, dtype="float32")


def _wrap_lora(model: Any, config: FinetuneConfig, seed: int) -> Any:
    import torch
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=0.0, target_modules="all-linear",
                      task_type="CAUSAL_LM")
    with warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
        warnings.simplefilter("ignore", FutureWarning)
        torch.manual_seed(seed)  # LoRA's A initialisation (public randomness; no privacy noise)
        return get_peft_model(model, lora)


def _export(backend: Any, model: Any, out: Path, report: dict[str, Any]) -> None:
    """The merged model, tokenizer, tokendp.json (prompt options of the base) and the report;
    with LoRA also the adapter alone in PEFT's layout (``OUT/adapter``, e.g. for a DP-SGD row in
    ``tokendp eval predict``: it carries the same guarantee, being the same release)."""
    if hasattr(model, "merge_and_unload"):
        adapter = out / ADAPTER_DIR
        if adapter.exists():
            shutil.rmtree(adapter)
        model.save_pretrained(adapter)
    merged = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
    tmp = out / ".model"
    if tmp.exists():
        shutil.rmtree(tmp)
    merged.save_pretrained(tmp, safe_serialization=True)
    backend.tokenizer.save_pretrained(tmp)
    if backend.options:
        (tmp / "tokendp.json").write_text(json.dumps(backend.options, indent=2) + "\n", encoding="utf-8")
    for item in tmp.iterdir():
        item.replace(out / item.name)
    tmp.rmdir()
    (out / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------- the job
@renamed_keywords(base="model")
def finetune(data: str | Path | None = None, *, out: str | Path, model: str = "tiny", config: FinetuneConfig | None = None,
             texts: list[str] | None = None, tagger: Any = None, pos: Any = None, device: str | None = None,
             on_progress: Callable[[Any], None] | None = None, on_phase: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Fine-tune ``model`` on the JSONL corpus ``data`` (or ``texts``) into ``out``; returns the
    report (also written to ``out/finetune.json``). Rerun with the same arguments to resume: the
    checkpoint is taken up only by the same corpus (by content, not by size) and settings. A
    finished run is returned as it is when the settings match; its directory keeps no trace of
    the corpus's content (the release), so it cannot check that the corpus is the same.

    ``tagger`` and ``pos`` replace the tiered detector's entity tagger and part-of-speech source
    (tests pass hand-made ones). ``on_progress`` receives a
    :class:`~tokendp.training.Progress` after every step; ``on_phase`` a short label
    as the run moves from reading to training to saving.
    """
    config = (config or FinetuneConfig()).check()
    from tokendp._optional import require

    if config.method != "none":
        require("opacus", "train", f"tokendp finetune --method {config.method}", why="for per-sample gradients and noise")
    if config.lora_r:
        require("peft", "train", "tokendp finetune", why="for LoRA (or pass --lora-r 0 to train every weight)")
    from tokendp.jobs.finetune.data import build_records, read_texts

    phase = on_phase or (lambda label: None)
    corpus = list(texts) if texts is not None else read_texts(data, text_field=config.text_field)
    if not corpus:
        raise InvalidInputError("the corpus holds no records")
    root = Path(out)
    fmt = CanaryFormat(digits=config.canary_digits)
    canaries = make_canaries(config.canaries, repeats=config.canary_repeats, seed=config.seed, fmt=fmt) if config.canaries else []
    corpus = insert_canaries(corpus, canaries, seed=config.seed, fmt=fmt) if canaries else corpus

    import torch

    from tokendp.generation import make_generator

    private = config.method != "none"
    # The noise and the Poisson sample are the privacy randomness: OS-seeded unless --noise-seed.
    noise = make_generator(config.noise_seed) if private else None
    sampler = make_generator(None if config.noise_seed is None else config.noise_seed + 1) if private else None
    plan_path = root / PLAN_FILE
    settings = {"format": FORMAT, "base": str(model), "config": asdict(config), "records": len(corpus)}
    if plan_path.is_file():
        saved = json.loads(plan_path.read_text(encoding="utf-8"))
        if saved["settings"] != settings:
            raise InvalidInputError(f"{root} holds a run with other data or settings; use a new --out (or the same settings to resume)")
        if (root / REPORT_FILE).is_file():  # finished: its model is out; training again would be a second release
            return json.loads((root / REPORT_FILE).read_text(encoding="utf-8"))
        plan = saved["plan"]
    else:  # one record per text: the plan needs only their number, and refuses an unreachable epsilon now
        draws = [] if noise is None else torch.rand(config.passes - 1, generator=noise, dtype=torch.float64).tolist()
        plan = make_plan(config, len(corpus), draws)
    phase("loading model")
    backend = load_base(model, device=device)
    detect = None
    if config.method == "atdp":
        from tokendp.text.sensitivity import TieredDetector

        detect = TieredDetector(config.tier, tagger=tagger, pos=pos).spans
    phase("reading records")
    max_context = backend.max_context
    if max_context is not None and config.max_length > max_context:
        raise InvalidParameterError(f"--max-length {config.max_length} exceeds the model's context of {max_context} tokens")
    records = build_records(corpus, backend.tokenizer, max_length=config.max_length, truncate=config.truncate,
                            weight=config.weight if config.method == "atdp" else 1.0, detect=detect)
    root.mkdir(parents=True, exist_ok=True)
    if not plan_path.is_file():
        plan_path.write_text(json.dumps({"settings": settings, "plan": plan}, indent=2) + "\n", encoding="utf-8")
    from tokendp.jobs.finetune.train import Plan, Trainer

    network = _wrap_lora(backend.model, config, config.seed) if config.lora_r else backend.model
    if not config.lora_r:
        network.requires_grad_(True)
    sigmas = tuple(s for s in plan.get("sigma_per_epoch", []) for _ in range(plan["steps_per_epoch"]))
    run_plan = Plan(private=plan["private"], epochs=config.passes, steps_per_epoch=plan["steps_per_epoch"],
                    batch_size=config.batch_size, sampling_rate=plan["sampling_rate"] or 1.0, sigmas=sigmas,
                    clip_norm=config.clip_norm, lr=config.lr, epsilon_budget=plan.get("epsilon_rdp"),
                    delta=config.delta if plan["private"] else None, accountant=plan.get("accountant", "rdp"))
    # The run's identity: a content hash of the corpus (canaries included) and every setting. It
    # lives only in the checkpoint, which holds non-private weights and is deleted at the end: a
    # hash of the corpus is not DP, so the released directory keeps none.
    from tokendp.training import fingerprint

    run = fingerprint(data=corpus, settings={k: v for k, v in settings.items() if k != "records"})
    trainer = Trainer(network, records, run_plan, pad_id=backend._pad_id(), workdir=root, run=run,
                      data_generator=sampler or torch.Generator().manual_seed(config.seed), noise_generator=noise,
                      grad_sample_mode=config.grad_sample_mode, checkpoint_every=config.checkpoint_every,
                      keep_generator_states=not private or config.noise_seed is not None)
    trainer.resume()
    phase("training")
    trainer.run(on_progress)
    phase("saving")
    report = _report(config, model, plan, trainer, canaries)
    if canaries:
        write_canaries(root / CANARY_FILE, canaries, fmt)
    _export(backend, network, root, report)
    (root / ".checkpoint.pt").unlink(missing_ok=True)
    return report


def _report(config: FinetuneConfig, base: str, plan: dict[str, Any], trainer: Any, canaries: list) -> dict[str, Any]:
    keep = ("batch_size", "lr", "max_length", "truncate", "clip_norm", "seed", "grad_sample_mode")
    report: dict[str, Any] = {
        "format": FORMAT, "method": config.method, "base": str(base), "records": plan["records"],
        "steps": trainer.step, "steps_per_epoch": plan["steps_per_epoch"],
        "training": {"epochs": config.passes, **{k: getattr(config, k) for k in keep}},
        "lora": ({"r": config.lora_r, "alpha": config.lora_alpha, "targets": "all-linear", "merged": True, "adapter": ADAPTER_DIR}
                 if config.lora_r else None),
        "train_seconds": round(trainer.elapsed, 1),
        "canaries": ({"count": len(canaries), "repeats": config.canary_repeats, "digits": config.canary_digits, "file": CANARY_FILE}
                     if canaries else None),
    }
    if config.method == "atdp":
        report["atdp"] = {"tier": config.tier, "tiers": list(TIERS), "weight": config.weight, "gamma": config.gamma,
                          "jitter": config.jitter, "ceiling": config.ceiling}
    if plan["private"]:
        from tokendp.accounting import describe_accountant

        report["privacy"] = {
            "unit": "record (one JSONL line, or one canary copy): sample-level, add/remove adjacency",
            "epsilon": trainer.epsilon(), "delta": config.delta, "accountant": config.accountant,
            "epsilon_target": config.epsilon, "sampling_rate": plan["sampling_rate"],
            "noise_multiplier": plan["noise_multiplier"], "sigma_per_epoch": plan["sigma_per_epoch"],
            "clip_norm": config.clip_norm,
            "accountant_method": describe_accountant(config.accountant),
            # The looser RDP bound of the same steps: what the step-by-step ledger charged (Opacus's
            # RDPAccountant agrees at the same orders); the certificate is "epsilon" above.
            "epsilon_rdp": trainer.ledger.epsilon("record"),
        }
    else:
        report["privacy"] = None
    return report

