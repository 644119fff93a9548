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


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the tokendp modules it imports (at any depth of its code, lazy imports too):
    ``from a import b`` names the module ``a.b`` where there is one, else ``a``."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        out = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules:
                out |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                        for a in node.names}
            elif isinstance(node, ast.Import):
                out |= {a.name for a in node.names if a.name in modules}
        graph[name] = out - {name}
    return graph


def test_no_import_cycle():
    """No module imports one that imports it back, directly or through others (Tarjan's SCCs)."""
    graph, index, low, stack, on_stack, cycles = _import_graph(), {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert cycles == []
