"""What the CLI says on stderr besides its output and its errors: one-line notes on what it is
doing, progress bars and timings, set by the global -q/--quiet, -v/--verbose and
--progress/--no-progress options, and colour (off when NO_COLOR is set).

Everything here is a phase, a count, a rate, a parameter or a path: never document text, and
never the text being generated (the release is the final text and its certificate). Bars show
counts only, and only where a person watches: stderr a terminal (or --progress), never with
-q or --json. On a terminal a bar redraws itself; elsewhere (--progress into a log, a pipe, a
CI job), where a reader shows a line only once it ends, the same counts come as whole lines
(:class:`LineBar`), at most every :data:`LINE_SECONDS`.
"""

from __future__ import annotations

import contextlib
import math
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
# ... and without a total (a count and its rate), and as a line where stderr is not a terminal.
COUNT_FORMAT = "{desc}: {n_fmt} {unit}s [{elapsed}, {rate_noinv_fmt}]"
LINE_FORMAT = "{desc}: {percentage:3.0f}% {n_fmt}/{total_fmt} {unit}s [{elapsed}<{remaining}, {rate_noinv_fmt}]"
LINE_SECONDS = 10.0  # where stderr is not a terminal: a progress line at most this often (and at each new phase)


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

    def bar(self, *, desc: str, total: int | None, unit: str = "token", as_json: bool = False) -> Any:
        """A bar on stderr in the CLI's one style (``desc``: the command or step; counts of
        ``unit`` out of ``total``, None if unknown, and their rate), only where :meth:`bars` says:
        on a terminal a tqdm bar, cleared when done; elsewhere a :class:`LineBar`."""
        from tqdm import tqdm

        shown = self.bars(as_json=as_json)
        if shown and not sys.stderr.isatty():
            return LineBar(desc=desc, total=total, unit=unit)
        return tqdm(desc=desc, unit=unit, total=total, file=sys.stderr, leave=False, dynamic_ncols=True,
                    bar_format=BAR_FORMAT if total is not None else COUNT_FORMAT, disable=not shown)

    @contextlib.contextmanager
    def tokens(self, message: str, total: int | None, *, desc: str, as_json: bool = False
               ) -> Iterator[TokenProgress]:
        """:meth:`info` ``message``, then a bar of the ``total`` tokens a generation may
        release (None: not known here); yields its :class:`TokenProgress`, the
        ``on_token(index, token_id)`` callback that advances it by one. With -v the count and
        rate after."""
        self.info(message)
        start = time.perf_counter()
        with self.bar(desc=desc, total=total, as_json=as_json) as bar:
            progress = TokenProgress(bar, desc)
            yield progress
        seconds = time.perf_counter() - start
        released = progress.released
        self.detail(f"{released} tokens in {seconds:.1f} s ({released / max(seconds, 1e-9):.1f} tokens/s)")

    @contextlib.contextmanager
    def step(self, message: str) -> Iterator[None]:
        """:meth:`info` ``message`` before a step, and with -v how long it took after it."""
        self.info(message)
        start = time.perf_counter()
        yield
        self.detail(f"{message}: done in {time.perf_counter() - start:.1f} s")


class TokenProgress:
    """One generation's progress as a person sees it: the tokens released so far and their rate,
    and for a long document the passage being rewritten. Public counts only: a token is counted
    and dropped, and the passages are planned from the public row (docs/sanitize.md, "Long
    documents")."""

    def __init__(self, bar: Any, desc: str) -> None:
        self.bar, self.desc, self.released = bar, desc, 0

    def __call__(self, index: int, token_id: int) -> None:
        """``on_token(index, token_id)``: one more token released (of any document)."""
        self.count()

    def count(self, n: int = 1) -> None:
        """``n`` more tokens released."""
        self.released += n
        self.bar.update(n)

    def settle(self, released: int) -> None:
        """The release's own count, which the report gives: a passage's end-of-text token is
        sampled (and counted as it streams) but not released."""
        self.released = released

    def on_passage(self, index: int, k: int, n: int) -> None:
        """``on_passage(index, k, n)``: document ``index`` begins its passage ``k`` (from 0, as
        :func:`tokendp.long_documents.run_passages` counts its rounds) of ``n``; shown as
        "passage k+1 of n"."""
        self.bar.set_description_str(f"{self.desc} (passage {k + 1} of {n})")


class LineBar:
    """A bar for a reader of whole lines (a log, a pipe, a CI job): its state as one line on
    stderr (``tokendp: DESC: 50% 3/6 tokens [elapsed<left, rate]``) at the first count, at most
    every :data:`LINE_SECONDS` after, at once when its description changes (a new phase), and
    its last state when it closes. The methods of tqdm's bar that the console uses."""

    def __init__(self, *, desc: str, total: int | None, unit: str) -> None:
        self.desc, self.total, self.unit, self.n = desc, total, unit, 0
        self._start = time.perf_counter()
        self._shown: tuple[str, int] | None = None  # (desc, n) of the last line
        self._last = -math.inf

    def update(self, n: int = 1) -> None:
        self.n += n
        if self._shown is None or time.perf_counter() - self._last >= LINE_SECONDS:
            self._line()

    def set_description_str(self, desc: str) -> None:
        self.desc = desc
        self._line()

    def _line(self) -> None:
        from tqdm import tqdm

        self._last = time.perf_counter()
        self._shown = (self.desc, self.n)
        click.echo("tokendp: " + tqdm.format_meter(self.n, self.total, self._last - self._start, prefix=self.desc,
                                                   unit=self.unit,
                                                   bar_format=LINE_FORMAT if self.total else COUNT_FORMAT), err=True)

    def __enter__(self) -> LineBar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._shown is not None and self._shown != (self.desc, self.n):
            self._line()


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
