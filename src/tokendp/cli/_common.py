"""Helpers shared by the sub-commands: input paths, the decoding, model placement and corpus
engine options, diagnostics and JSON output. Errors and exit codes: :mod:`tokendp.cli._exit`;
old option names: :mod:`tokendp.cli._aliases`."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from tokendp.cli._aliases import renamed  # noqa: F401 (re-exported for the commands)
from tokendp.cli._console import console
from tokendp.cli._exit import BadInputError, CLIError, Interrupted, library_errors  # noqa: F401 (re-exported)
from tokendp.errors import InvalidParameterError
from tokendp.params import (ACCOUNTINGS, DEFAULT_NO_REPEAT_NGRAM_SIZE, DEFAULT_PACE,
                             DEFAULT_STOP_AT_REPEATED_LINE)


def floats(value: str | None, option: str) -> tuple[float, ...] | None:
    """An option's comma-separated numbers ("4,8,16"), None for None; anything else is a
    parameter error naming ``option``."""
    if value is None:
        return None
    try:
        return tuple(float(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise InvalidParameterError(f"{option} takes comma-separated numbers, got {value!r}") from None


class InputPath(click.Path):
    """``click.Path(exists=True)`` for an input the command reads (a corpus, prompts, an ensemble):
    a path that is missing, unreadable or of the wrong kind is bad input, exit code 3 (README
    "Exit codes"), not a usage error; the message is click's, naming the option and the path."""

    def __init__(self, *, file_okay: bool = True, dir_okay: bool = True) -> None:
        super().__init__(exists=True, file_okay=file_okay, dir_okay=dir_okay, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as err:
            raise BadInputError(err.format_message()) from None


INPUT_FILE = InputPath(dir_okay=False)
INPUT_DIR = InputPath(file_okay=False)

DIAGNOSTICS_WARNING = ("WARNING: the diagnostics {where} are data-dependent and NOT covered by the privacy guarantee; "
                       "keep them apart from the output and do not publish them")


def decoding_options(command: Callable) -> Callable:
    """The public decoding options of the DP-Fusion commands (sanitize, generate): decoding
    constraints computed from released tokens only, and speculative decoding."""
    options = [
        click.option("--no-repeat-ngram-size", type=click.IntRange(min=0), default=DEFAULT_NO_REPEAT_NGRAM_SIZE,
                     show_default=True,
                     help="Never release a token that repeats an n-gram of this many tokens already released (0: off; "
                          "the default was chosen against loops, docs/sanitize.md \"Loops\"). Public: the same for "
                          "every row."),
        click.option("--repetition-penalty", type=float, default=1.0, show_default=True,
                     help="Penalise tokens already released (CTRL; 1: off). Public: the same for every row."),
        click.option("--stop-at-repeated-line/--no-stop-at-repeated-line", default=DEFAULT_STOP_AT_REPEATED_LINE,
                     show_default=True,
                     help="End the output (a long document: its passage) at a line that repeats an earlier line of "
                          "its own, cut before it: a loop's sign, read from the released text only (public)."),
        click.option("--speculative/--no-speculative", default=None,
                     help="Verify tokens guessed from the public context several per forward pass: the same "
                          "output distribution and guarantee, fewer passes (docs/privacy.md, \"Speculative "
                          "decoding\") [default: on for one document or prompt, off for a batch of several]."),
        click.option("--draft-tokens", type=click.IntRange(min=1), default=8, show_default=True,
                     help="Tokens guessed per pass with --speculative."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def accounting_options(command: Callable) -> Callable:
    """``--accounting`` and ``--pace``: how DP-Fusion charges its span groups (public settings)."""
    command = click.option(
        "--pace", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_PACE, show_default=True,
        help="With --accounting filter: one token may spend at most PACE x B / n of a group's budget B, n the "
             "tokens the group hides (public).")(command)
    return click.option(
        "--accounting", type=click.Choice(list(ACCOUNTINGS)), default="fixed", show_default=True,
        help="fixed: every one of the T tokens is charged the per-token cap. filter: each group spends an RDP "
             "budget fixed from --epsilon alone, charged per token what it actually moved (a per-group Renyi "
             "filter), so the certificate does not depend on T; a group's text is mixed in with a weight of at "
             "most min(1, sqrt(B / (4 alpha))) (docs/sanitize.md).")(command)


DTYPES = ("float32", "bfloat16", "float16")


def placement_options(command: Callable) -> Callable:
    """``--device`` and ``--dtype``: where and in what precision the model runs (public settings;
    the guarantee does not depend on them)."""
    command = click.option("--dtype", type=click.Choice(DTYPES), default=None,
                           help="dtype of the model's weights [default: float32 on cpu, bfloat16 on cuda].")(command)
    return click.option("--device", default=None,
                        help="torch device, e.g. cpu, cuda, cuda:1 [default: cuda if available, else cpu].")(command)


def tagger_option(help: str) -> Callable[[Callable], Callable]:
    """``--tagger``, one of the registered taggers (listed in --help)."""
    from tokendp.text.taggers.registry import TAGGER_NAMES

    return click.option("--tagger", type=click.Choice(TAGGER_NAMES), default="auto", show_default=True,
                        help=f"{help} auto: the patterns and the learned CRF combined; patterns: the pattern "
                             "recognisers only; model: the learned CRF only; presidio, spacy: those packages' "
                             "recognisers (their extras; docs/tagging.md).")


def diagnostics_option(what: str, *, corpus: bool = False) -> Callable[[Callable], Callable]:
    """``--diagnostics``: ``what`` (data-dependent quantities) printed on stderr after a warning,
    never in the output; for a corpus with --out, written beside it instead (docs/privacy.md,
    "Common ground")."""
    beside = " (a corpus with --out: in NAME.diagnostics.jsonl beside the output)" if corpus else ""
    return click.option("--diagnostics", is_flag=True,
                        help=f"Also give {what}: data-dependent, NOT covered by the guarantee, so never in the output "
                             f"but on stderr after a one-line warning{beside}.")


def emit_diagnostics(lines: Sequence[str]) -> None:
    """The one-line warning, then the diagnostics' JSON lines, on stderr."""
    click.echo(DIAGNOSTICS_WARNING.format(where="below"), err=True)
    for line in lines:
        click.echo(line, err=True)


BUSY_MACHINE = ("On a busy machine, --threads 1 is the steadiest: beside one busy process it keeps its quiet "
                "speed (docs/performance.md).")


def threads_option(command: Callable) -> Callable:
    """``--threads N``: torch's CPU threads for a command that runs a model (:func:`use_threads`)."""
    return click.option("--threads", type=click.IntRange(min=1), default=None,
                        help=f"Torch CPU threads [default: torch's]. {BUSY_MACHINE}")(command)


def use_threads(threads: int | None) -> None:
    """Set torch's intra-op threads when ``--threads`` was given; else leave torch's choice."""
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


def engine_options(*, default: str | None, engine_help: str) -> Callable[[Callable], Callable]:
    """The corpus engine options of sanitize and synthesize: ``--engine`` (default ``default``)
    and the placement of its workers."""
    options = [
        click.option("--engine", type=click.Choice(["local", "ray"]), default=default, show_default=default is not None,
                     help=engine_help),
        click.option("--address", default=None,
                     help="Ray cluster to join (auto or HOST:6379); default: a local Ray instance."),
        click.option("--workers", type=click.IntRange(min=1), default=None,
                     help="Ray actors, one model each [default: 2]."),
        click.option("--gpus-per-worker", type=click.FloatRange(min=0), default=None,
                     help="GPUs per Ray actor [default: 0]."),
        click.option("--threads", type=click.IntRange(min=1), default=None,
                     help="Torch CPU threads (per worker for a corpus; a Ray actor reserves as many CPUs) "
                          f"[default: torch's, 1 per Ray actor]. {BUSY_MACHINE}"),
    ]

    def decorate(command: Callable) -> Callable:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def ray_options(engine: str | None, address: str | None, workers: int | None,
                gpus_per_worker: float | None) -> dict[str, Any]:
    """The Ray options given, refused with another engine."""
    given = {k: v for k, v in (("address", address), ("workers", workers), ("gpus_per_worker", gpus_per_worker))
             if v is not None}
    if given and engine != "ray":
        raise CLIError(f"--{next(iter(given)).replace('_', '-')} applies to --engine ray")
    return given


def run_corpus(command: str, input_path: str | Path, out_path: str | Path | None, start: Callable[..., Any]) -> None:
    """A corpus run of ``command`` as the CLI shows it: a first line on stderr before anything
    slow (importing torch, reading the corpus, loading the model), the run's own notes
    (``start(note=...)``: how many documents are left, the model loading), and its end
    (:func:`report_corpus_run`). Ctrl-C exits 130 saying that the same command resumes: every
    finished document is already on disk (docs/engines.md, "Interrupting and resuming")."""
    out = console()
    out.info(f"{command} {input_path}" + (f" into {out_path}" if out_path is not None else "")
             + ": checking every record before loading anything")
    try:
        run = start(note=out.info)
    except KeyboardInterrupt:
        if out_path is None:
            raise Interrupted("interrupted; nothing was written (without --out the records go to stdout at the end; "
                              "with --out a rerun resumes)") from None
        raise Interrupted(f"interrupted; rerun the same command to resume: the finished records are kept for "
                          f"{out_path}") from None
    report_corpus_run(run, out_path)


def report_corpus_run(run: Any, out_path: str | Path | None) -> None:
    """An engine run's end: its records on stdout without --out, the summary and where the
    output is (both not under -q) or that a rerun resumes it on stderr, or that the output was
    already complete (a rerun of a finished run); the diagnostics, if any,
    apart: on stderr after the warning, or (with --out) where they were written."""
    quiet = console().quiet
    if run.lines is not None:
        click.echo("\n".join(run.lines))
    if getattr(run, "complete", False):
        if not quiet:
            click.echo(f"{run.output} is complete: its {run.summary.skipped} {run.summary.noun} were written by a run "
                       "with the same settings and input; nothing to do", err=True)
    else:
        if not quiet:
            click.echo(run.summary.format(), err=True)
        if out_path is not None and not run.output:
            click.echo(f"not finished: rerun to resume into {out_path}", err=True)
        elif out_path is not None and not quiet:
            click.echo(f"wrote {run.output}", err=True)
    if run.diagnostics is not None:
        emit_diagnostics(run.diagnostics)
    if run.diagnostics_path is not None:
        click.echo(DIAGNOSTICS_WARNING.format(where=f"in {run.diagnostics_path}"), err=True)


def echo_json(data: Any) -> None:
    """Print ``data`` as indented JSON (non-ASCII kept as is)."""
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))


def eval_command(name: str) -> str:
    """``tokendp eval NAME ...`` as it was typed (for the results files), or "" when not run from a shell."""
    if name not in sys.argv:
        return ""
    return "tokendp eval " + " ".join(shlex.quote(a) for a in sys.argv[sys.argv.index(name):])


def finish_eval(name: str, rows: Sequence[dict[str, Any]], write: Callable[..., list[Path]],
                table: Callable[[Sequence[dict[str, Any]]], str], *, out_dir: Path, plots: bool, as_json: bool) -> None:
    """Write an evaluation's results (with the ``tokendp eval NAME ...`` line that made them) and
    print them: JSON, or the Markdown table and the files written."""
    paths = write(rows, out_dir, command=eval_command(name), plots=plots)
    if as_json:
        click.echo(json.dumps(list(rows), indent=2))
    else:
        click.echo(table(rows))
        click.echo("wrote " + ", ".join(str(p) for p in paths))
