"""`tokendp eval tagger`: a hand-written marked set, mention counts in the table and the JSON,
and its argument checks."""

import json

from click.testing import CliRunner

from tokendp.cli import main

SET = ("=== a ===\nMr Smith lodged application no. {{CODE|36110/97}} on {{DATETIME|30 May 1996}} and paid "
       "{{QUANTITY|GBP 5,000}} to {{PERSON|Mr F.A. Hollis}}.\n")


def _run(*args):
    return CliRunner().invoke(main, ["eval", "tagger", *map(str, args)])


def test_marked_set_gives_mentions_per_label(tmp_path):
    path = tmp_path / "set.txt"
    path.write_text(SET, encoding="utf-8")
    result = _run("--marked", path, "--tagger", "patterns", "--json")
    assert result.exit_code == 0, result.output
    scores = json.loads(result.output)["taggers"]["patterns"]
    assert scores["mentions_by_label"]["CODE"] == {"whole": 1, "partial": 0, "missed": 0, "whole_rate": 1.0}
    assert scores["mentions"]["whole"] + scores["mentions"]["partial"] + scores["mentions"]["missed"] == 4
    table = _run("--marked", path, "--tagger", "patterns")
    assert table.exit_code == 0 and "mentions whole" in table.output and "(1/0/0)" in table.output


def test_one_set_and_no_whole_for_auto_only(tmp_path):
    path = tmp_path / "set.txt"
    path.write_text(SET, encoding="utf-8")
    neither = _run("--tagger", "patterns")
    assert neither.exit_code != 0 and "--data" in neither.output and "--marked" in neither.output
    both = _run("--data", tmp_path, "--marked", path)
    assert both.exit_code != 0
    wrong = _run("--marked", path, "--tagger", "patterns", "--no-whole")
    assert wrong.exit_code != 0 and "auto tagger only" in wrong.output
