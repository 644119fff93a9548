"""The examples of docs/integrations.md, run as written: each ```python block of a section."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"


def examples(section: str) -> list[str]:
    """The python blocks under the heading ``## section``, in order."""
    text = DOC.read_text(encoding="utf-8")
    parts = re.split(r"^## ", text, flags=re.MULTILINE)
    body = next(p for p in parts if p.startswith(section + "\n"))
    return re.findall(r"^```python\n(.*?)^```", body, flags=re.MULTILINE | re.DOTALL)


def run(section: str, *indexes: int, namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    """Execute the blocks ``indexes`` of ``section`` in one namespace (a later block may use an
    earlier one's names, as a reader running them in turn would); return it."""
    namespace = {"__name__": "__docs_example__"} if namespace is None else namespace
    blocks = examples(section)
    for i in indexes:
        exec(compile(blocks[i], f"docs/integrations.md ({section}, example {i + 1})", "exec"), namespace)
    return namespace
