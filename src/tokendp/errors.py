"""Errors the library raises on bad input. The CLI maps them to exit codes (tokendp.cli._exit).

Messages say what is wrong and what to do; they never carry private text.
"""


class TokenDPError(Exception):
    """Base class of tokendp's own errors."""


class InvalidParameterError(TokenDPError, ValueError):
    """A privacy or generation parameter is out of range (CLI exit code 2)."""


class InvalidInputError(TokenDPError, ValueError):
    """A document, span file or model input is malformed (CLI exit code 3)."""


class BudgetExceededError(TokenDPError):
    """A ledger refused a step that would exceed a privacy budget (CLI exit code 5)."""


class MissingDependencyError(TokenDPError, ImportError):
    """An optional package a command needs is not installed (CLI exit code 4).

    Raised by :func:`tokendp._optional.require` before any work is done; the message names
    what to install (``pip install "tokendp[extra]"``).
    """
