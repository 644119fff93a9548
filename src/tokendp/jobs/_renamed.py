"""Old keyword names of the jobs, kept as deprecated aliases of the CLI's one vocabulary.

The Python functions take the command line's names (README "One vocabulary"): the model is
``model=``, T is ``max_new_tokens=``, B is ``references_per_text=``. An older keyword still works
for a while: :func:`renamed_keywords` maps it to the new one with a ``FutureWarning`` (shown to
users by default) that names the new keyword.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def renamed_keywords(**renames: str) -> Callable[[F], F]:
    """Decorator: ``renamed_keywords(base="model")`` lets callers still pass ``base=`` for
    ``model=``, with a ``FutureWarning``; both at once is a ``TypeError``, as Python's own for a
    keyword given twice. ``inspect.signature`` shows the function's own (new) parameters."""

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for old, new in renames.items():
                if old not in kwargs:
                    continue
                if new in kwargs:
                    raise TypeError(f"{function.__name__}() got {new}= and its deprecated spelling {old}=; give {new}= only")
                warnings.warn(f"{function.__name__}({old}=...) is deprecated, use {new}= (the old name will be removed "
                              "in a future release)", FutureWarning, stacklevel=2)
                kwargs[new] = kwargs.pop(old)
            return function(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


#: JSON keys renamed to the command line's words; the old key stays beside the new one for one
#: release, listed under ``"deprecated_keys"`` (old -> new).
RENAMED_KEYS: dict[str, str] = {"batch_size": "references_per_text", "max_tokens": "max_new_tokens"}


def with_cli_keys(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with each key of :data:`RENAMED_KEYS` under its new name (in its place), the old
    key kept after it, and ``deprecated_keys`` naming the old ones (README "One vocabulary")."""
    out: dict[str, Any] = {}
    old = {k: v for k, v in RENAMED_KEYS.items() if k in record}
    for key, value in record.items():
        out[RENAMED_KEYS.get(key, key)] = value
    out.update({k: record[k] for k in old})
    if old:
        out["deprecated_keys"] = old
    return out
