"""The import layers of docs/design.md ("Modules and layers"): a module imports only from lower layers.

Checked on the source text (ast), so nothing is imported. Imports of the package facade
``tokendp`` itself (``__version__``, the lazy exports) are allowed from the command line only.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "tokendp"

# Low to high, as in docs/design.md; a module may import from a strictly lower rank.
RANK = {
    "errors": 0,
    "_optional": 1, "_device": 1, "malloc": 1, "openmp": 1, "startup": 1, "params": 1,
    "accounting": 2, "text": 2,
    "divergence": 3, "models": 3,
    "mechanisms": 4, "backends": 4, "sampling": 4, "logits_processors": 4, "drafts": 4, "training": 4,
    "generation": 5, "ensemble": 5,
    "long_documents": 6,
    "fusion": 7,
    "jobs": 8,
    "eval": 9,
    "service": 10, "engines": 10,
    "cli": 11, "integrations": 11, "__main__": 12,
}


def _layer(module: str) -> str:
    """'tokendp.mechanisms.dp_fusion' -> 'mechanisms'; 'tokendp' -> ''."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def test_every_top_level_module_has_a_layer():
    names = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert names - set(RANK) == set(), "add the new module to RANK here and to docs/design.md"


def test_modules_import_only_from_lower_layers():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        own = rel.parts[0].removesuffix(".py")
        if own == "__init__":  # the package facade: lazy exports only
            continue
        for module in _imports(path):
            if module != "tokendp" and not module.startswith("tokendp."):
                continue
            layer = _layer(module)
            if layer == own:
                continue
            if layer == "" and own == "cli":
                continue
            if layer == "" or RANK[layer] >= RANK[own]:
                bad.append(f"{rel.as_posix()} imports {module}")
    assert bad == []
