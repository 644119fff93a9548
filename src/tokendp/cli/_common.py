"""Helpers shared by the sub-commands: library errors become exit code 2 with their message."""

from __future__ import annotations

import functools
import json
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from tokendp.errors import TokenDPError

EXIT_BAD_INPUT = 2


def decoding_options(command: Callable) -> Callable:
    """The public decoding options of the DP-Fusion commands (sanitize, generate): decoding
    constraints computed from released tokens only, and speculative decoding."""
    options = [
        click.option("--no-repeat-ngram-size", type=click.IntRange(min=0), default=0, show_default=True,
                     help="Never release a token that repeats an n-gram already released (0: off). "
                          "Public: the same for every row."),
        click.option("--repetition-penalty", type=float, default=1.0, show_default=True,
                     help="Penalise tokens already released (CTRL; 1: off). Public: the same for every row."),
        click.option("--speculative/--no-speculative", default=None,
                     help="Verify tokens guessed from the public context several per forward pass: the same "
                          "output distribution and guarantee, fewer passes (docs/privacy.md, \"Speculative "
                          "decoding\") [default: on for one document or prompt, off for a batch of several]."),
        click.option("--draft-tokens", type=click.IntRange(min=1), default=4, show_default=True,
                     help="Tokens guessed per pass with --speculative."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


class CLIError(click.ClickException):
    """A clear one-line message on stderr and exit code 2."""

    exit_code = EXIT_BAD_INPUT


def library_errors(command):
    """Decorator: turn :class:`tokendp.errors.TokenDPError` into :class:`CLIError`."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except TokenDPError as err:
            raise CLIError(str(err)) from None

    return wrapper


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
