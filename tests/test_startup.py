"""The command's loading step runs without cyclic collections and freezes what it loaded."""

from __future__ import annotations

import gc

import pytest

from tokendp.startup import loading


@pytest.fixture(autouse=True)
def restore_collector():
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if enabled else gc.disable)()


def test_collection_is_paused_inside_and_resumed_after_with_the_loaded_objects_frozen():
    gc.enable()
    gc.unfreeze()
    with loading():
        assert not gc.isenabled()
        loaded = [[i] for i in range(10)]  # what an import leaves alive (lists: tracked by the collector)
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(loaded)
    assert not any(o is loaded[0] for o in gc.get_objects())  # in no generation a collection walks


def test_a_collector_the_caller_disabled_stays_disabled_and_an_error_still_resumes():
    gc.disable()
    with loading():
        pass
    assert not gc.isenabled()
    gc.enable()
    with pytest.raises(RuntimeError), loading():
        raise RuntimeError("the model failed to load")
    assert gc.isenabled()


def test_sanitize_loads_inside_the_paused_step(monkeypatch, tmp_path):
    """The CLI's one-document path enters loading() around its load (and leaves the collector on)."""
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
    assert entered and gc.isenabled()
