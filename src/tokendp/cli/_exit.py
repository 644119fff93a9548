"""The exit codes of the ``tokendp`` command, in one place, and how an error is shown.

Every failure of the command ends in one of :data:`EXIT_CODES` (README "Exit codes",
the top-level ``--help``): 2 when the command line is wrong, 3 when an input is, 4 when an
optional package is missing, 5 when a privacy budget ran out after part of the output was
released, 6 when a served vault could not be reached or could not answer now (``tokendp vault
list/rewrite/ask``), 130 (the shell's 128 + SIGINT) when Ctrl-C stopped it. The library's errors
(:mod:`tokendp.errors`) are mapped here by their class; the message is the library's own,
which never carries private text.

Shown as ``Error: MESSAGE`` on stderr, or with ``--json`` as one line of JSON on stderr, the
last line it writes: ``{"error": {"exit_code": 3, "kind": "bad_input", "message": "..."}}``
(stdout keeps only results, so a redirected result file never holds an error).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import click

from tokendp.errors import (BudgetExceededError, InvalidInputError, InvalidParameterError, MissingDependencyError,
                            TokenDPError)

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_BAD_INPUT = 3
EXIT_MISSING_EXTRA = 4
EXIT_BUDGET = 5
EXIT_SERVICE = 6
EXIT_INTERRUPTED = 130

# code -> (kind in the JSON error, what it means): the one table README, docs and --help show.
EXIT_CODES: dict[int, tuple[str, str]] = {
    EXIT_OK: ("ok", "success"),
    EXIT_ERROR: ("error", "an unexpected error (a traceback is a bug: please report it)"),
    EXIT_USAGE: ("usage", "usage: a bad, missing or conflicting option, or parameters that cannot be met"),
    EXIT_BAD_INPUT: ("bad_input", "bad input: an unreadable or malformed file, corpus, ensemble or model"),
    EXIT_MISSING_EXTRA: ("missing_extra", "a missing optional extra (the message says what to install)"),
    EXIT_BUDGET: ("budget_exhausted", "budget exhausted: predict printed a partial output (or a ledger refused)"),
    EXIT_SERVICE: ("service_unavailable", "the service: unreachable, rate-limited or failing (5xx); retry later"),
    EXIT_INTERRUPTED: ("interrupted", "interrupted (Ctrl-C); a corpus run with --out resumes when rerun"),
}


def exit_codes_epilog() -> str:
    """The exit codes as the top-level ``--help`` lists them (``\\b`` keeps click from rewrapping)."""
    lines = [f"  {code}  {meaning}" for code, (_, meaning) in EXIT_CODES.items()]
    return ("\b\nExit codes (README, \"Exit codes\"):\n" + "\n".join(lines)
            + "\n\nWith --json, an error is one JSON line on stderr, its last line.")


class CLIError(click.ClickException):
    """A clear one-line message on stderr; exit code 2 (the command line is wrong) unless given."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class BadInputError(CLIError):
    """An input file (document, spans, corpus, prompts) that cannot be read or is malformed: exit code 3."""

    exit_code = EXIT_BAD_INPUT


class BudgetExhaustedError(CLIError):
    """The budget ran out after part of the output was released (printed before this): exit code 5."""

    exit_code = EXIT_BUDGET


class Interrupted(CLIError):
    """Ctrl-C (SIGINT): exit code 130 with a line saying what to do, instead of click's
    "Aborted!" and 1, the code of a bug."""

    exit_code = EXIT_INTERRUPTED

    def show(self, file: Any = None) -> None:
        import sys

        if sys.stderr.isatty():  # past the terminal's "^C"
            click.echo("", err=True)
        super().show(file)


def exit_code_of(err: TokenDPError) -> int:
    """The exit code of a library error, by its class (subclasses of the ``tokendp.errors`` classes
    inherit theirs; anything else, such as an internal check failing, is 1)."""
    from tokendp.models.cache import ModelCacheError, ModelNotInstalledError

    if isinstance(err, (MissingDependencyError, ModelNotInstalledError)):
        return EXIT_MISSING_EXTRA
    if isinstance(err, InvalidParameterError):
        return EXIT_USAGE
    if isinstance(err, (InvalidInputError, ModelCacheError)):
        return EXIT_BAD_INPUT
    if isinstance(err, BudgetExceededError):
        return EXIT_BUDGET
    return EXIT_ERROR


def library_errors(command: Callable) -> Callable:
    """Decorator: turn :class:`tokendp.errors.TokenDPError` into :class:`CLIError` with the
    error's exit code (:func:`exit_code_of`) and message."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except TokenDPError as err:
            raise CLIError(str(err), exit_code_of(err)) from None

    return wrapper


def json_error(err: click.ClickException) -> str:
    """``err`` as the one JSON line ``--json`` prints on stderr."""
    code = err.exit_code
    kind = EXIT_CODES.get(code, ("error", ""))[0]
    message = err.format_message()
    if isinstance(err, click.UsageError) and err.ctx is not None:
        message = f"{message} (see '{err.ctx.command_path} --help')"
    return json.dumps({"error": {"exit_code": code, "kind": kind, "message": message}}, ensure_ascii=False)


def wants_json(args: list[str]) -> bool:
    """Whether the command line asks for ``--json`` (before a ``--`` that ends the options)."""
    head = args[:args.index("--")] if "--" in args else args
    return "--json" in head


class JSONErrorGroup(click.Group):
    """The top-level group: runs the command as click does, but shows a failure as one JSON line
    on stderr when the command line has ``--json`` (:func:`json_error`), with the same exit code;
    Ctrl-C is :class:`Interrupted` (130) unless the command said more."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise Interrupted("interrupted") from None

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        import sys

        argv = list(sys.argv[1:] if args is None else args)
        if not standalone_mode or not wants_json(argv):
            return super().main(argv, prog_name, complete_var, standalone_mode, **extra)
        try:
            result = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as err:
            click.echo(json_error(err), err=True)
            sys.exit(err.exit_code)
        except click.Abort:
            click.echo(json.dumps({"error": {"exit_code": EXIT_ERROR, "kind": "error", "message": "aborted"}}),
                       err=True)
            sys.exit(EXIT_ERROR)
        sys.exit(result if isinstance(result, int) else EXIT_OK)
