"""Test harness for the step without host reads (docs/performance.md, "The step without host reads").

Two tools, so that a CPU-only machine checks what an accelerator would do:

* :func:`force_accelerator_path` makes :func:`tokendp._device.reads_are_free` answer False, so
  the CPU runs the code path an accelerator runs (no early exits, no reads of flags).
* :class:`HostReads` counts, while active, every operation that reads a tensor's value on the
  host or whose output size depends on its values (each a synchronisation on an accelerator):
  ``item``, ``tolist``, ``cpu``, ``numpy``, ``bool()``, ``int()``, ``float()``, ``__index__``,
  ``nonzero`` / ``argwhere``, ``unique``, ``masked_select``, indexing with a boolean tensor,
  ``repeat_interleave`` with tensor repeats, ``torch.equal`` / ``allclose``, and ``.to("cpu")`` (the string only: on the CPU a device
  object cannot tell a read from a no-op).
  Each read is attributed to the first frame outside torch and this file: reads made by tokendp
  (``sites``) are kept apart from those of other libraries (``foreign``, e.g. transformers).
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import torch

import tokendp._device

_TORCH = str(Path(torch.__file__).resolve().parent)
_TOKENDP = str(Path(tokendp._device.__file__).resolve().parent)
_HERE = str(Path(__file__).resolve())

_METHODS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__", "nonzero",
            "argwhere", "unique", "masked_select")
_FUNCTIONS = ("nonzero", "argwhere", "unique", "masked_select", "equal", "allclose")


def force_accelerator_path(monkeypatch) -> None:
    """Make every early exit of the step take the accelerator's branch (reads are not free)."""
    monkeypatch.setattr(tokendp._device, "reads_are_free", lambda tensor: False)


class HostReads:
    """Counts host reads while ``active`` (see the module docstring); install with :meth:`install`."""

    def __init__(self) -> None:
        self.active = False
        self.sites: collections.Counter[str] = collections.Counter()
        self.foreign: collections.Counter[str] = collections.Counter()

    @property
    def count(self) -> int:
        """Reads made by tokendp itself."""
        return sum(self.sites.values())

    def reset(self) -> None:
        self.sites.clear()
        self.foreign.clear()

    def __enter__(self) -> HostReads:
        self.active = True
        return self

    def __exit__(self, *exc) -> None:
        self.active = False

    def _record(self, what: str) -> None:
        frame = sys._getframe(2)
        while frame is not None:
            name = str(Path(frame.f_code.co_filename).resolve())
            if not (name.startswith(_TORCH) or name == _HERE):
                break
            frame = frame.f_back
        if frame is None:
            return
        name = str(Path(frame.f_code.co_filename).resolve())
        site = f"{Path(name).name}:{frame.f_code.co_name}:{what}"
        (self.sites if name.startswith(_TOKENDP) else self.foreign)[site] += 1

    def install(self, monkeypatch) -> HostReads:
        """Wrap the reading operations of torch (undone by ``monkeypatch`` at the test's end)."""
        for name in _METHODS:
            monkeypatch.setattr(torch.Tensor, name, self._wrap(getattr(torch.Tensor, name), name))
        for name in _FUNCTIONS:
            monkeypatch.setattr(torch, name, self._wrap(getattr(torch, name), f"torch.{name}"))
        original_get, original_set = torch.Tensor.__getitem__, torch.Tensor.__setitem__
        original_to, original_repeat = torch.Tensor.to, torch.Tensor.repeat_interleave
        original_repeat_fn = torch.repeat_interleave

        def getitem(tensor, index):
            if self.active and _has_bool_tensor(index):
                self._record("x[bool mask]")
            return original_get(tensor, index)

        def setitem(tensor, index, value):
            if self.active and _has_bool_tensor(index):
                self._record("x[bool mask] = ...")
            return original_set(tensor, index, value)

        def to(tensor, *args, **kwargs):
            target = kwargs.get("device", args[0] if args else None)
            if self.active and isinstance(target, str) and target.startswith("cpu"):  # a device object: ambiguous here
                self._record(".to('cpu')")
            return original_to(tensor, *args, **kwargs)

        def repeat(tensor, repeats=None, *args, **kwargs):
            if self.active and isinstance(repeats, torch.Tensor):
                self._record("repeat_interleave")
            return original_repeat(tensor, repeats, *args, **kwargs)

        def repeat_fn(input, repeats=None, *args, **kwargs):
            if self.active and (isinstance(repeats, torch.Tensor) or (repeats is None and isinstance(input, torch.Tensor))):
                self._record("torch.repeat_interleave")
            return original_repeat_fn(input, repeats, *args, **kwargs) if repeats is not None else original_repeat_fn(input)

        monkeypatch.setattr(torch.Tensor, "__getitem__", getitem)
        monkeypatch.setattr(torch.Tensor, "__setitem__", setitem)
        monkeypatch.setattr(torch.Tensor, "to", to)
        monkeypatch.setattr(torch.Tensor, "repeat_interleave", repeat)
        monkeypatch.setattr(torch, "repeat_interleave", repeat_fn)
        return self

    def _wrap(self, original, what: str):
        def wrapper(*args, **kwargs):
            if self.active:
                self._record(what)
            return original(*args, **kwargs)
        return wrapper


def _has_bool_tensor(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)
