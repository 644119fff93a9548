"""Optional dependencies, checked when a command starts (before any model is loaded).

Every import of a package that is not a core dependency goes through :func:`require`, so a
missing one ends the command at once with exit code 2 and one line that says what to
install, instead of a traceback after the work (issue 12). The message names packages and
extras only, never input text.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from tokendp.errors import MissingDependencyError


def require(module: str, extra: str | None, what: str, *, why: str = "", package: str | None = None) -> ModuleType:
    """Import and return ``module``, or raise :class:`~tokendp.errors.MissingDependencyError`.

    Args:
        module: the import name (``"matplotlib"``, ``"presidio_analyzer"``).
        extra: the tokendp extra that installs it (``"eval"`` gives ``pip install "tokendp[eval]"``),
            or None for a package no extra provides (then ``pip install <package>``).
        what: who needs it, e.g. ``"tokendp eval sanitize"`` or ``"the presidio tagger"``.
        why: an optional reason appended after the package name, e.g. ``"for its plots"``.
        package: the distribution name when it differs from ``module`` (``"python-crfsuite"``).

    The message reads ``<what> needs <package> [<why>]: pip install ...``.
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        name = package or module
        install = f'pip install "tokendp[{extra}]"' if extra else f"pip install {name}"
        reason = f" {why}" if why else ""
        raise MissingDependencyError(f"{what} needs {name}{reason}: {install}") from None
