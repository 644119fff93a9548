"""The integrations are optional extras: ``import tokendp`` imports none of their frameworks, and a
missing one is a MissingDependencyError naming the extra (simulated with sys.modules[name] = None)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tokendp.errors import MissingDependencyError

SRC = Path(__file__).resolve().parents[2] / "src"
FRAMEWORKS = ("langchain_core", "llama_index", "presidio_analyzer", "presidio_anonymizer", "datasets", "httpx",
              "bm25s")


def test_import_tokendp_imports_no_framework():
    code = ("import json, sys, tokendp, tokendp.integrations, tokendp.integrations.presidio; tokendp.sanitize_dataset; "
            f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {FRAMEWORKS!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(SRC), "PATH": ""})
    assert json.loads(out.stdout) == []


@pytest.mark.parametrize("module,missing,extra", [
    ("tokendp.integrations.langchain", "langchain_core", "langchain"),
    ("tokendp.integrations.llamaindex", "llama_index.core", "llamaindex"),
])
def test_a_missing_framework_names_its_extra(monkeypatch, module, missing, extra):
    monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.setitem(sys.modules, missing, None)
    with pytest.raises(MissingDependencyError) as info:
        importlib.import_module(module)
    assert str(info.value).endswith(f'pip install "tokendp[{extra}]"')


def test_sanitize_dataset_without_datasets_names_its_extra(monkeypatch):
    import tokendp

    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(MissingDependencyError, match=r'tokendp.sanitize_dataset needs datasets: pip install '
                                                     r'"tokendp\[datasets\]"'):
        tokendp.sanitize_dataset(["a document"], epsilon=8)


def test_the_retrievers_without_httpx_or_bm25s_name_their_extra(monkeypatch):
    pytest.importorskip("langchain_core")
    from tokendp.integrations.langchain import TokenDPVaultRetriever

    monkeypatch.setenv("TOKENDP_KEY", "tdp_test")
    monkeypatch.setitem(sys.modules, "httpx", None)
    with pytest.raises(MissingDependencyError, match=r'TokenDPVaultRetriever needs httpx: pip install "tokendp\[langchain\]"'):
        TokenDPVaultRetriever(epsilon=3)
    monkeypatch.undo()
    monkeypatch.setenv("TOKENDP_KEY", "tdp_test")
    retriever = TokenDPVaultRetriever(epsilon=3, url="http://127.0.0.1:9")
    monkeypatch.setitem(sys.modules, "bm25s", None)
    with pytest.raises(MissingDependencyError, match=r"needs bm25s to rank the releases: pip install"):
        retriever.invoke("patient")
