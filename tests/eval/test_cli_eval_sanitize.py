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


def test_bad_new_tokens_and_a_missing_candidate_file_exit_2(tmp_path):
    for value in ("abc", "0", "-3"):
        result = CliRunner().invoke(main, _args(tmp_path, "--max-new-tokens", value))
        assert result.exit_code == 2 and "--max-new-tokens" in result.output and "auto" in result.output
    result = CliRunner().invoke(main, ["eval", "sanitize", "--data", str(tmp_path), "--candidates",
                                       str(tmp_path / "missing.json"), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "--candidates" in result.output and "Traceback" not in result.output
