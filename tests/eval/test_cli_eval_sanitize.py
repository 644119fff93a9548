"""`tokendp eval sanitize` is registered and maps bad parameters to exit code 2."""

from click.testing import CliRunner

from tokendp.cli import main


def _args(tmp_path, *extra):
    (tmp_path / "c.json").write_text("{}")
    return ["eval", "sanitize", "--data", str(tmp_path), "--candidates", str(tmp_path / "c.json"),
            "--out", str(tmp_path / "out"), *extra]


def test_help_lists_the_options():
    result = CliRunner().invoke(main, ["eval", "sanitize", "--help"])
    assert result.exit_code == 0
    for option in ("--methods", "--epsilon", "--paper-settings", "--limit", "--max-chars", "--out"):
        assert option in result.output


def test_bad_epsilon_list_exits_2(tmp_path):
    result = CliRunner().invoke(main, _args(tmp_path, "--epsilon", "10,abc"))
    assert result.exit_code == 2 and "--epsilon" in result.output


def test_bad_threads_exits_2(tmp_path):
    result = CliRunner().invoke(main, _args(tmp_path, "--threads", "0"))
    assert result.exit_code == 2 and "--threads" in result.output
