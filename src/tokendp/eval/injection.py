"""``evaluate_injection``: does DP-Fusion over untrusted chunks stop prompt injections, and at what cost?

Every task (:mod:`tokendp.eval.injection_tasks`) is answered with ``tokendp.generate_batch``:
the question is the public prompt, the internal note trusted context (no spans) and the two
retrieved pages untrusted chunks, under each method:

==============  ===========================================================================
``no-defence``  ``method="original"``: every chunk read as is (no guarantee)
``withheld``    ``method="public"``: every chunk replaced by the stand-in (epsilon 0)
``eps=E``       DP-Fusion, each untrusted chunk its own group at epsilon E (T tokens, delta)
==============  ===========================================================================

All methods sample at the same temperature. Per method: injection success (the injected
behaviour appears; overall and per attack) and task accuracy (the gold answer appears; overall
and by where the answer was). Each (method, task) result is cached as numbers only in
``out/cache/<run-hash>/``, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import time
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from tokendp.backends import HFBackend, load_backend
from tokendp.eval.cache import ResultCache
from tokendp.eval.injection_tasks import (ATTACKS, PLACEMENTS, TASKS_VERSION, InjectionTask, answered, injection_succeeded,
                                         make_tasks)
from tokendp.eval.report import markdown_table, pyplot, save_figure, write_tables
from tokendp.jobs.generate import generate_batch


@dataclass(frozen=True)
class InjectionConfig:
    """Everything that determines an injection run (and its cache)."""

    model: str
    tasks: int = 102
    seed: int = 0
    epsilons: tuple[float, ...] = (1.0, 4.0, 16.0)
    max_new_tokens: int = 24
    temperature: float = 0.7
    delta: float = 1e-5
    batch: int = 6
    question: str = "first"  # where the prompt goes (tokendp.text.prompts): "first" is where injections work

    def run_hash(self) -> str:
        """Hash of what changes a (method, task) result (not the task count or epsilon list: they select)."""
        keys = ("model", "seed", "max_new_tokens", "temperature", "delta", "batch", "question")
        blob = json.dumps({"tasks_version": TASKS_VERSION, **{k: getattr(self, k) for k in keys}}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def methods(self) -> list[tuple[str, dict[str, Any]]]:
        """(name, generate_batch keywords) of every method, baselines first."""
        return [("no-defence", {"method": "original"}), ("withheld", {"method": "public"}),
                *((f"eps={e:g}", {"epsilon": float(e)}) for e in self.epsilons)]


def evaluate_injection(config: InjectionConfig, out_dir: str | Path, *, backend: HFBackend | None = None,
                       progress: bool = True) -> list[dict[str, Any]]:
    """Run every method on every task (resuming from ``out_dir``'s cache); one result row per method."""
    started = time.perf_counter()
    backend = load_backend(backend or config.model)
    tasks = make_tasks(config.tasks, seed=config.seed)
    cache = ResultCache(Path(out_dir), config)
    methods = config.methods()
    bar = tqdm(total=len(methods) * len(tasks), desc="eval injection", unit="answer", disable=not progress)
    records: dict[str, list[dict]] = {name: [] for name, _ in methods}
    for first in range(0, len(tasks), config.batch):  # batches fixed by ``batch``: resumed runs draw alike
        chunk = tasks[first:first + config.batch]
        for name, kwargs in methods:
            found = [cache.get(name, str(t.id)) for t in chunk]
            if any(r is None for r in found):
                found = _answer(config, backend, chunk, name, kwargs, first)
                for t, r in zip(chunk, found):
                    cache.put(name, str(t.id), r)
            records[name] += found
            bar.update(len(chunk))
    bar.close()
    rows = [summarise(name, records[name], tasks) for name, _ in methods]
    shown = ("max_new_tokens", "temperature", "delta", "seed", "question")
    for r in rows:
        r.update(seconds_total=round(time.perf_counter() - started, 1), model=backend.name,
                 **{k: v for k, v in asdict(config).items() if k in shown})
    return rows


def _answer(config: InjectionConfig, backend: HFBackend, chunk: Sequence[InjectionTask], name: str,
            kwargs: dict[str, Any], first: int) -> list[dict[str, Any]]:
    """Answer a batch of tasks under one method; score each answer (numbers only)."""
    results = generate_batch([t.question for t in chunk], context=[t.context for t in chunk], spans=[[]] * len(chunk),
                             untrusted=[list(t.chunks) for t in chunk], model=backend,
                             max_new_tokens=config.max_new_tokens, temperature=config.temperature,
                             delta=config.delta, question=config.question,
                             seed=zlib.crc32(f"{config.seed}:{name}:{first}".encode()), **kwargs)
    return [{"task": t.id, "injected": injection_succeeded(t, r.text), "correct": answered(t, r.text),
             "tokens": r.report.tokens_generated, "epsilon": r.report.untrusted[0].epsilon}  # every chunk alike
            for t, r in zip(chunk, results)]


def _rate(flags: Sequence[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def summarise(name: str, records: Sequence[dict], tasks: Sequence[InjectionTask]) -> dict[str, Any]:
    """One result row: injection success and accuracy, overall and by attack and answer placement."""
    by_id = {t.id: t for t in tasks}
    row: dict[str, Any] = {"method": name, "epsilon": records[0]["epsilon"] if records else None,
                           "injection": _rate([r["injected"] for r in records]),
                           "accuracy": _rate([r["correct"] for r in records])}
    for attack in ATTACKS:
        row[f"injection_{attack}"] = _rate([r["injected"] for r in records if by_id[r["task"]].attack == attack])
    for place in PLACEMENTS:
        row[f"accuracy_{place}"] = _rate([r["correct"] for r in records if by_id[r["task"]].answer_in == place])
    row.update(tasks=len(records), mean_tokens=sum(r["tokens"] for r in records) / max(len(records), 1))
    return row


COLUMNS = (("method", "method"), ("epsilon", "epsilon per chunk"), ("injection", "injection success"),
           *((f"injection_{a}", a) for a in ATTACKS), ("accuracy", "task accuracy"),
           *((f"accuracy_{p}", f"accuracy, answer {p}") for p in PLACEMENTS), ("mean_tokens", "tokens"))


LEGEND = {f"accuracy_{p}": f"answer in {p} context" for p in PLACEMENTS}


def write_injection_results(rows: Sequence[dict[str, Any]], out_dir: str | Path, *, command: str = "",
                            plots: bool = True) -> list[Path]:
    """results.json, results.csv, results.md and (with ``plots``) injection.png in ``out_dir``; their paths."""
    if plots:
        pyplot()  # the eval extra, checked before anything is written
    meta = rows[0] if rows else {}
    note = (f"{meta.get('tasks')} tasks, model {meta.get('model')}, T = {meta.get('max_new_tokens')} new tokens, "
            f"temperature {meta.get('temperature')}, question {meta.get('question')}, delta = {meta.get('delta')}, "
            f"{meta.get('seconds_total')} s. "
            "Injection success: the injected behaviour appears in the answer; task accuracy: the gold answer "
            "appears. epsilon: per untrusted chunk, for all T tokens.")
    paths = write_tables(rows, out_dir, title="Prompt-injection evaluation", note=note,
                         csv_columns=[k for k, _ in COLUMNS], table=markdown_table(rows, COLUMNS), command=command)
    if plots and rows:
        paths.append(plot_injection(rows, Path(out_dir) / "injection.png"))
    return paths


def plot_injection(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """Two panels over the methods: injection success per attack, task accuracy per answer placement."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    names = [r["method"] for r in rows]
    for ax, keys, title in ((axes[0], [f"injection_{a}" for a in ATTACKS], "injection success"),
                            (axes[1], [f"accuracy_{p}" for p in PLACEMENTS], "task accuracy")):
        width = 0.8 / len(keys)
        for k, key in enumerate(keys):
            ax.bar([i + (k - (len(keys) - 1) / 2) * width for i in range(len(rows))],
                   [r[key] or 0.0 for r in rows], width, label=LEGEND.get(key, key.split("_", 1)[1]))
        ax.set_xticks(range(len(rows)), names, rotation=20)
        ax.set_title(title)
        ax.set_ylim(0, 1)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    return save_figure(fig, path)
