"""Old option names kept as hidden, deprecated aliases of the CLI's one vocabulary.

The commands share one name per concept (README "One vocabulary"): the model is ``--model``,
T is ``--max-new-tokens``, ... An older spelling still works for a while: :func:`renamed`
adds it as a hidden option that feeds the new one and says on stderr that it is deprecated.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

from tokendp.cli._exit import CLIError


def deprecation_message(old: str, new: str) -> str:
    """The line an old option name prints on stderr (also under -q: it is a warning)."""
    return f"tokendp: {old} is deprecated, use {new} (the old name will be removed in a future release)"


def renamed(old: str, new: str) -> Callable[[Callable], Callable]:
    """Decorator, placed right under ``@click.command``: keep ``old`` (e.g. ``"--base"``) as a
    hidden alias of the option whose parameter is ``new`` (e.g. ``"model"``).

    Given ``old``, the command prints :func:`deprecation_message` on stderr and receives the value
    as ``new``; both given is a usage error. A required ``new`` option stays required: it is
    checked after the alias had its chance (and its help says ``[required]``).
    """

    def decorate(command: Callable) -> Callable:
        params: list[click.Parameter] = list(getattr(command, "__click_params__", []))
        target = next((p for p in params if p.name == new), None)
        if not isinstance(target, click.Option):
            raise TypeError(f"renamed({old!r}, {new!r}): no option {new!r} below it")
        flag = max(target.opts, key=len)
        dest = "old_" + old.lstrip("-").replace("-", "_")
        required = target.required
        if required:
            target.required = False
            target.help = f"{target.help or ''} [required]".strip()
        alias = click.Option([old, dest], type=target.type, default=None, hidden=True,
                             help=f"Deprecated spelling of {flag}.")

        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            value = kwargs.pop(dest)
            ctx = click.get_current_context()
            if value is not None:
                if ctx.get_parameter_source(new) not in (ParameterSource.DEFAULT, None):
                    raise CLIError(f"give {flag} once ({old} is its deprecated spelling)")
                click.echo(deprecation_message(old, flag), err=True)
                kwargs[new] = value
            elif required and kwargs.get(new) is None:
                raise click.MissingParameter(ctx=ctx, param=target)
            return command(*args, **kwargs)

        wrapper.__click_params__ = [*params, alias]  # type: ignore[attr-defined]
        return wrapper

    return decorate
