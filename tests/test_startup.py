"""The command's loading step runs without full collections and freezes what it loaded."""

from __future__ import annotations

import gc

import pytest

from tokendp.startup import loading


@pytest.fixture(autouse=True)
def restore_collector():
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_full_collections_wait_inside_and_resume_after_with_the_loaded_objects_frozen():
    gc.unfreeze()
    before = gc.get_threshold()
    with loading():
        young, middle, old = gc.get_threshold()
        assert (young, middle) == before[:2] and old >= 2**30  # young collections still run
        loaded = [[i] for i in range(10)]  # what an import leaves alive (lists: tracked by the collector)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() >= len(loaded)
    assert not any(o is loaded[0] for o in gc.get_objects())  # in no generation a collection walks


def test_an_error_while_loading_still_restores_the_thresholds():
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), loading():
        raise RuntimeError("the model failed to load")
    assert gc.get_threshold() == before


def test_sanitize_loads_inside_the_paused_step(monkeypatch, tmp_path):
    """The CLI's one-document path enters loading() around its load."""
    from click.testing import CliRunner

    import importlib

    from tokendp.cli import main

    cli_sanitize = importlib.import_module("tokendp.cli.sanitize")  # the module, not the command it defines
    entered = []

    def recording():
        entered.append(True)
        return loading()

    monkeypatch.setattr(cli_sanitize, "loading", recording)
    doc = tmp_path / "doc.txt"
    doc.write_text("Mr Smith lives in Paris.")
    result = CliRunner().invoke(main, ["sanitize", str(doc), "--model", "tiny", "--beta", "0.01",
                                       "--max-new-tokens", "3", "--seed", "0", "--json"])
    assert result.exit_code == 0, result.output
    assert entered
