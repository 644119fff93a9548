"""The command line makes OpenMP threads sleep while they wait, unless the user chose otherwise."""

from __future__ import annotations

import os

from click.testing import CliRunner

from tokendp.cli import main
from tokendp.openmp import sleeping_openmp


def test_the_command_sets_a_sleeping_wait_before_any_subcommand_runs(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "")  # recorded, so the variable is restored after the test
    monkeypatch.delenv("OMP_WAIT_POLICY")
    result = CliRunner().invoke(main, ["account", "dp-fusion", "--alpha", "2", "--beta", "0.01", "--groups", "1",
                                       "--max-new-tokens", "10", "--delta", "1e-5"])
    assert result.exit_code == 0, result.output
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"


def test_a_policy_the_user_set_is_kept(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    sleeping_openmp()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
