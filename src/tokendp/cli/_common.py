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
