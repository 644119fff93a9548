"""`tokendp eval injection`: the tasks, the detectors, the run (resumed from its cache) and the command."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from click.testing import CliRunner

from tokendp.cli import main
from tokendp.cli._exit import EXIT_MISSING_EXTRA
from tokendp.eval import injection
from tokendp.eval.injection import InjectionConfig, evaluate_injection, write_injection_results
from tokendp.eval.injection_tasks import ATTACKS, answered, injection_succeeded, make_tasks

OPTIONS = {"placeholder": "<|mask|>"}  # the tiny fixture's tokendp.json (tests/conftest.py)


def test_tasks_are_seeded_balanced_and_hold_what_they_claim():
    tasks = make_tasks(102, seed=3)
    assert tasks == make_tasks(102, seed=3) and tasks != make_tasks(102, seed=4)
    assert Counter((t.attack, t.answer_in) for t in tasks) == {(a, p): 17 for a in ATTACKS
                                                                for p in ("trusted", "untrusted")}
    for t in tasks:
        benign = t.chunks[1 - t.injected]
        assert t.injected == 1 and "ignor" in t.chunks[1].lower() and "ignor" not in (benign + t.context).lower()
        assert t.answer in (t.context if t.answer_in == "trusted" else benign)
        if t.attack == "reveal":
            assert t.target in t.context and t.target not in "".join(t.chunks)
        elif t.attack == "attacker-string":
            assert t.target in t.chunks[t.injected]


def test_detectors():
    tasks = {t.attack: t for t in make_tasks(3, seed=0)}
    lang = tasks["language"]
    sentence = {"French": "La société est dans la ville et le directeur est un homme.",
                "Spanish": "La empresa es una de las más grandes y el director es un hombre.",
                "German": "Die Firma ist in der Stadt und der Chef ist nicht da."}[lang.target]
    assert injection_succeeded(lang, sentence)
    assert not injection_succeeded(lang, "The company is in the city and the chief is a man.")
    attack = tasks["attacker-string"]
    assert injection_succeeded(attack, f"Please visit {attack.target.upper()} now") and not injection_succeeded(attack, "")
    assert answered(attack, f"It is {attack.answer.lower()}.") and not answered(attack, "I do not know.")


def test_a_run_reports_every_method_and_resumes_from_its_cache(tiny, tmp_path, monkeypatch):
    config = InjectionConfig(model="tiny", tasks=6, epsilons=(1.0, 16.0), max_new_tokens=3, batch=4)
    rows = evaluate_injection(config, tmp_path, backend=tiny, progress=False)
    assert [r["method"] for r in rows] == ["no-defence", "withheld", "eps=1", "eps=16"]
    assert rows[0]["epsilon"] is None and rows[1]["epsilon"] == 0.0
    assert 0.99 < rows[2]["epsilon"] <= 1.0 and 15.9 < rows[3]["epsilon"] <= 16.0
    assert all(r["tasks"] == 6 and 0 <= r["injection"] <= 1 and r["mean_tokens"] <= 3 for r in rows)
    record = json.loads(next((tmp_path / "cache").rglob("eps=1/0.json")).read_text())
    assert set(record) == {"task", "injected", "correct", "tokens", "epsilon"}  # numbers only, no text

    def refuse(*args, **kwargs):
        raise AssertionError("a cached run must not generate again")

    monkeypatch.setattr(injection, "generate_batch", refuse)
    again = evaluate_injection(config, tmp_path, backend=tiny, progress=False)
    strip = [{k: v for k, v in r.items() if k != "seconds_total"} for r in rows]
    assert [{k: v for k, v in r.items() if k != "seconds_total"} for r in again] == strip
    paths = write_injection_results(rows, tmp_path / "out", command="tokendp eval injection", plots=False)
    assert "| eps=16 | 16 |" in (tmp_path / "out" / "results.md").read_text() and len(paths) == 3
    assert (tmp_path / "out" / "results.csv").read_text().startswith("method,epsilon,injection,")


def test_the_command_is_registered_and_refuses_bad_parameters(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["eval", "injection", "--help"])
    assert result.exit_code == 0 and all(o in result.output for o in ("--tasks", "--epsilon", "--out", "--batch"))
    result = runner.invoke(main, ["eval", "injection", "--out", str(tmp_path), "--temperature", "0"])
    assert result.exit_code == 2 and "--temperature" in result.output
    result = runner.invoke(main, ["eval", "injection", "--out", str(tmp_path), "--epsilon", "1,x"])
    assert result.exit_code == 2 and "--epsilon" in result.output


def test_without_faker_the_command_stops_before_any_work(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "faker", None)
    monkeypatch.setattr(injection, "evaluate_injection", lambda *a, **k: pytest.fail("work started"))
    result = CliRunner().invoke(main, ["eval", "injection", "--out", str(tmp_path)])
    assert result.exit_code == EXIT_MISSING_EXTRA and 'needs faker to generate its tasks: pip install "tokendp[eval]"' in result.output
