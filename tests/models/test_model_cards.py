"""Every weight file shipped in the package has a model card beside it (licence, data, how to
rebuild), and the package data ships the card with the weights (issue 29, item 10)."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11 (the package data check only)

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "tokendp"
WEIGHTS = sorted(p for ext in ("*.safetensors", "*.crfsuite", "*.gguf", "*.bin", "*.pt")
                 for p in PACKAGE.rglob(ext) if "__pycache__" not in p.parts)


def test_the_package_ships_weights():
    assert {p.name for p in WEIGHTS} >= {"model.safetensors", "adapter_model.safetensors", "tagger.crfsuite"}


@pytest.mark.parametrize("weights", WEIGHTS, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_each_weight_file_has_a_model_card(weights):
    card = weights.parent / "README.md"
    assert card.is_file(), f"{weights.relative_to(ROOT)} has no README.md model card beside it"
    text = card.read_text(encoding="utf-8")
    assert "## Licence" in text and "Apache-2.0" in text
    assert "data" in text.lower() and ("## Training data" in text or "## Data" in text or "**Training data**" in text)
    assert "```bash" in text and ("scripts/train_" in text)  # the commands that rebuild it


@pytest.mark.parametrize("weights", WEIGHTS, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_package_data_includes_the_weights_and_their_card(weights):
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["tokendp"]
    for path in (weights, weights.parent / "README.md"):
        relative = path.relative_to(PACKAGE).as_posix()
        assert any(fnmatch.fnmatch(relative, pattern) for pattern in patterns), f"{relative} is not package data"
