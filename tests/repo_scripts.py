"""Load the repository's scripts and benchmarks (files, not packages) as modules for tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str) -> ModuleType:
    """The file ``relative`` to the repository root (``"benchmarks/rewriter.py"``), executed as a
    fresh module registered in ``sys.modules`` (dataclasses resolve their annotations through
    it) as ``repo_<folder>_<stem>``."""
    path = ROOT / relative
    name = f"repo_{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
