"""Helpers shared by CLI sub-commands: library errors become exit code 2."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import click

from tokendp.errors import TokenDPError


def library_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a ``TokenDPError`` raised by ``func`` into a message on stderr and exit code 2."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except TokenDPError as err:
            click.echo(f"error: {err}", err=True)
            raise SystemExit(2) from None

    return wrapper


def echo_json(data: Any) -> None:
    """Print ``data`` as indented JSON."""
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))
