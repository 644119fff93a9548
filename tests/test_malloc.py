"""tokendp.malloc: the glibc tuning the CLI applies at start-up."""

from __future__ import annotations

import platform

import pytest

from tokendp.malloc import keep_freed_memory


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_applies_on_glibc_and_is_idempotent() -> None:
    assert keep_freed_memory() is True
    assert keep_freed_memory() is True


def test_cli_start_up_applies_it(monkeypatch) -> None:
    from click.testing import CliRunner

    import tokendp.cli as cli

    calls = []
    monkeypatch.setattr(cli, "keep_freed_memory", lambda: calls.append(1) or True)
    result = CliRunner().invoke(cli.main, ["account", "convert", "--rho", "0.5", "--delta", "1e-5"])
    assert result.exit_code == 0, result.output
    assert calls == [1]
