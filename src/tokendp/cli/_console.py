"""What the CLI says on stderr besides its output and its errors: one-line notes on what it is
doing, progress bars and timings, set by the global -q/--quiet, -v/--verbose and
--progress/--no-progress options, and colour (off when NO_COLOR is set).

Everything here is a phase, a count, a rate, a parameter or a path: never document text, and
never the text being generated (the release is the final text and its certificate). Bars show
counts only, and only where a person watches: stderr a terminal (or --progress), never with
-q or --json.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import click
from click.core import ParameterSource

# tqdm's default, with the rate always per second ("0.5 token/s", never "2 s/token").
BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}]"


@dataclass
class Console:
    """The stderr policy of one command line (the click context's ``obj``)."""

    quiet: bool = False
    verbose: bool = False
    progress: bool | None = None  # None: when stderr is a terminal

    def info(self, message: str) -> None:
        """A line saying what is happening, so that a long step never runs at a blank screen;
        silenced by -q."""
        if not self.quiet:
            click.echo(f"tokendp: {message}", err=True)

    def warn(self, message: str) -> None:
        """A warning about the result (silenced by -q, like every note: the report says it too)."""
        if not self.quiet:
            click.echo(f"tokendp: warning: {message}", err=True)

    def detail(self, message: str) -> None:
        """A line only -v asks for (timings, rates)."""
        if self.verbose and not self.quiet:
            click.echo(f"tokendp: {message}", err=True)

    def bars(self, *, as_json: bool = False) -> bool:
        """Whether to draw progress bars: never with -q or --json (a program reads that run),
        else as --progress/--no-progress says, else when stderr is a terminal."""
        if self.quiet or as_json:
            return False
        return sys.stderr.isatty() if self.progress is None else self.progress

    def bar(self, *, desc: str, total: int, unit: str = "token", as_json: bool = False) -> Any:
        """A tqdm bar on stderr in the CLI's one style (``desc``: the command or step; counts of
        ``unit`` and their rate), cleared when done; drawn only where :meth:`bars` says."""
        from tqdm import tqdm

        return tqdm(desc=desc, unit=unit, total=total, file=sys.stderr, leave=False, dynamic_ncols=True,
                    bar_format=BAR_FORMAT, disable=not self.bars(as_json=as_json))

    @contextlib.contextmanager
    def tokens(self, message: str, total: int, *, desc: str, as_json: bool = False
               ) -> Iterator[Callable[[int, int], None]]:
        """:meth:`info` ``message``, then a bar of the ``total`` tokens a generation may
        release; yields the ``on_token(index, token_id)`` callback that advances it by one
        (a count: the token itself is dropped). With -v the count and rate after."""
        self.info(message)
        released = 0

        def on_token(index: int, token_id: int) -> None:
            nonlocal released
            released += 1
            bar.update(1)

        start = time.perf_counter()
        with self.bar(desc=desc, total=total, as_json=as_json) as bar:
            yield on_token
        seconds = time.perf_counter() - start
        self.detail(f"{released} tokens in {seconds:.1f} s ({released / max(seconds, 1e-9):.1f} tokens/s)")

    @contextlib.contextmanager
    def step(self, message: str) -> Iterator[None]:
        """:meth:`info` ``message`` before a step, and with -v how long it took after it."""
        self.info(message)
        start = time.perf_counter()
        yield
        self.detail(f"{message}: done in {time.perf_counter() - start:.1f} s")


def _setter(field: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    """An option callback that sets ``field`` of the console only when the option was given, so
    that a subcommand's unset copy does not undo the group's."""
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if ctx.get_parameter_source(param.name) is not ParameterSource.DEFAULT:
            setattr(ctx.ensure_object(Console), field, value)
    return callback


def _global_options() -> list[click.Option]:
    return [
        click.Option(["-q", "--quiet"], is_flag=True, expose_value=False, callback=_setter("quiet"),
                     help="Say nothing on stderr but errors and warnings: no notes, no progress bars."),
        click.Option(["-v", "--verbose"], is_flag=True, expose_value=False, callback=_setter("verbose"),
                     help="Say more on stderr: how long each step took, tokens per second, library warnings "
                          "(-q wins over it)."),
        click.Option(["--progress/--no-progress"], default=None, expose_value=False, callback=_setter("progress"),
                     help="Draw progress bars (counts and rates, never text) on stderr, or not "
                          "[default: when stderr is a terminal; never with -q or --json]."),
    ]


def add_global_options(command: click.Command) -> None:
    """-q, -v and --progress on ``command`` and every subcommand below it, so that they work before
    the subcommand's name (``tokendp -q sanitize``) and after it (``tokendp sanitize -q``)."""
    command.params.extend(_global_options())
    for sub in getattr(command, "commands", {}).values():
        add_global_options(sub)


def no_color(ctx: click.Context) -> None:
    """Honour NO_COLOR (https://no-color.org): set and not empty, no ANSI colour or style in
    anything the command prints (``tokendp tag``'s highlighting included); the subcommands'
    contexts inherit it."""
    if os.environ.get("NO_COLOR"):
        ctx.color = False


def console() -> Console:
    """The current command line's console (a default one outside the ``tokendp`` group)."""
    ctx = click.get_current_context(silent=True)
    return Console() if ctx is None else ctx.ensure_object(Console)


@contextlib.contextmanager
def report_conversion(message: str, steps: tuple[str, ...] | None = None,
                      kind: str = "convert") -> Iterator[Callable[[str], None]]:
    """How the CLI shows a one-time job of a model load (SmolLM2's conversion, ``kind``
    "convert"; the merged rewriter's cache, "merge"), whichever command's load starts it
    (installed with :func:`tokendp.models.cache.report_conversions`): ``message`` as a note, a bar
    of the ``steps`` (default: the conversion's), and with -v how long it took."""
    from tokendp.models.cache import CONVERSION_STEPS

    steps = steps or CONVERSION_STEPS
    out = console()
    out.info(message)
    start = time.perf_counter()
    with out.bar(desc=f"{kind} ({steps[0]})", unit="step", total=len(steps)) as bar:
        begun = False

        def on_step(name: str) -> None:
            nonlocal begun
            bar.n += begun  # the step before it is done
            begun = True
            bar.set_description_str(f"{kind} ({name})")  # drawn at once, however soon after the last

        yield on_step
    out.detail(f"{'conversion' if kind == 'convert' else kind}: done in {time.perf_counter() - start:.1f} s")


def quiet_libraries() -> None:
    """transformers' and the hub's own loading bars off (the CLI draws its own), and their
    log messages down to errors (warnings too with -v). Called by a command that loads a model,
    after its first line: importing transformers takes a while."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    out = console()
    if out.verbose and not out.quiet:
        hf_logging.set_verbosity_warning()
    else:
        hf_logging.set_verbosity_error()
