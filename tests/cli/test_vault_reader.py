"""``tokendp vault list``, ``rewrite`` and ``ask`` against a real ``tokendp serve`` on the tiny
model: the answers with their certificates, every class of error with its exit code, the key
never in any output, and the help."""

from __future__ import annotations

import http.server
import json
import re
import threading
import urllib.request

import pytest
from click.testing import CliRunner

from tests.cli.test_vault_cli import LETTER, SPANS
from tests.service.conftest import Server, free_port
from tokendp.cli import main
from tokendp.cli._exit import EXIT_BAD_INPUT, EXIT_BUDGET, EXIT_ERROR, EXIT_SERVICE, EXIT_USAGE
from tokendp.cli.vault_reader import refusal

pytestmark = pytest.mark.slow

REWRITE_KEYS = {"id", "text", "report", "lifetime", "cached"}
PROGRESS = re.compile(r"tokendp: rewrite:\s+\d+% \d/7 tokens \[[0-9:]+<[0-9:?]+,\s+[?0-9.]+token/s\]")


def _key(db, role: str, tenant: str = "clinic") -> str:
    made = CliRunner().invoke(main, ["keys", "create", "--tenant", tenant, "--budget", "4", "--role", role, "--db", db])
    assert made.exit_code == 0, made.output
    return made.stdout.strip()


@pytest.fixture(scope="module")
def vault(tmp_path_factory):
    """(url, keys): a served vault of tenant clinic holding a (confirmed) and draft (a draft), with
    an owner key, a reader key, a reader key without quota left, and a reader of another tenant."""
    root = tmp_path_factory.mktemp("reader")
    db = str(root / "service.db")
    keys = {name: _key(db, role) for name, role in (("owner", "owner"), ("reader", "reader"), ("spent", "reader"))}
    keys["stranger"] = _key(db, "reader", tenant="other")
    corpus = root / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "a", "title": "Discharge letter", "text": LETTER, "spans": SPANS}) + "\n"
                      + json.dumps({"id": "draft", "text": LETTER}) + "\n", encoding="utf-8")
    added = CliRunner().invoke(main, ["vault", "add", str(corpus), "--tenant", "clinic", "--tagger", "patterns",
                                      "--db", db])
    assert added.exit_code == 0, added.output
    server = Server(root / "service.db", root / "server.log", "--rate-limit", "1000", "--max-new-tokens", "16").start()
    quota = urllib.request.Request(f"{server.url}/v1/readers/{keys['spent'][:10]}/quota", method="PUT",
                                   data=json.dumps({"releases_per_day": 0}).encode(),
                                   headers={"Authorization": f"Bearer {keys['owner']}",
                                            "Content-Type": "application/json"})
    assert urllib.request.urlopen(quota).status == 200
    yield server.url, keys
    server.stop()


def run(vault, *args, key: str = "reader", **kwargs):
    """``tokendp ARGS --url URL`` with the key in $TOKENDP_KEY; no key ever in what it printed."""
    url, keys = vault
    env = {"TOKENDP_KEY": keys.get(key, key), **kwargs.pop("env", {})}
    result = CliRunner().invoke(main, [*args, "--url", url], env=env, **kwargs)
    assert not any(k in result.output for k in keys.values()), "a key was printed"
    return result


def test_a_reader_lists_the_confirmed_documents_and_an_owner_every_one(vault, tmp_path):
    listed = run(vault, "vault", "list")
    assert listed.exit_code == 0, listed.output
    assert listed.stdout.splitlines() == ["id  title", "a   Discharge letter"]
    assert json.loads(run(vault, "vault", "list", "--json").stdout) == {"documents": [
        {"id": "a", "title": "Discharge letter"}]}
    key_file = tmp_path / "owner.key"
    key_file.write_text(vault[1]["owner"] + "\n")
    key_file.chmod(0o600)
    owner = run(vault, "vault", "list", "--key-file", key_file, key="")
    assert owner.exit_code == 0 and owner.stderr == "", owner.output
    assert owner.stdout.splitlines()[1:] == ["a      confirmed  Discharge letter", "draft  draft      "]


def test_a_rewrite_is_printed_with_its_certificate_then_returned_again_cached(vault):
    first = run(vault, "vault", "rewrite", "a", "--epsilon", "3", "--max-new-tokens", "5", "--json")
    assert first.exit_code == 0, first.output
    body = json.loads(first.stdout)
    assert set(body) == REWRITE_KEYS and body["cached"] is False
    assert [g["label"] for g in body["report"]["groups"]] == ["unit-001", "unit-002"]
    again = run(vault, "vault", "rewrite", "a", "--epsilon", "3", "--max-new-tokens", "5")
    assert again.exit_code == 0, again.output
    text, report = again.stdout.split("\n\n-- privacy report ", 1)
    assert text == body["text"].strip()
    lines = report.splitlines()
    assert any(line.startswith("unit-001 ") and line.split()[-2] == "3" for line in lines)  # its epsilon
    assert "lifetime: epsilon 4 at delta 1e-05 for each unit" in report and "(alpha 5, RDP budget B 1.747)" in report
    assert lines[-1].startswith("cached: a rewrite made before") and "spans: given" not in report
    assert again.stderr.startswith("tokendp: asking http://127.0.0.1:")


def test_a_release_counts_its_tokens_on_stderr_and_never_shows_their_text(vault):
    res = run(vault, "--progress", "vault", "rewrite", "a", "--epsilon", "3", "--max-new-tokens", "7", "-v")
    assert res.exit_code == 0, res.output
    first, *progress, rate = res.stderr.splitlines()
    assert first.startswith("tokendp: asking http://127.0.0.1:") and first.endswith(" for a rewrite of a (epsilon 3 "
                                                                                     "per unit)")
    assert progress and all(PROGRESS.fullmatch(line) for line in progress), res.stderr  # counts and rates only
    assert re.fullmatch(r"tokendp: \d tokens in [0-9.]+ s \([0-9.]+ tokens/s\)", rate)


def test_an_answer_names_the_documents_it_read(vault):
    res = run(vault, "vault", "ask", "When was the patient admitted?", "--epsilon", "3", "--max-new-tokens", "4",
              "--document", "a")
    assert res.exit_code == 0, res.output
    assert "\n-- privacy report " in res.stdout and "read: a (named)" in res.stdout and "lifetime: " in res.stdout
    found = json.loads(run(vault, "vault", "ask", "When was the patient admitted?", "--epsilon", "3",
                           "--max-new-tokens", "4", "--json").stdout)
    assert found["documents"] == ["a"] and set(found) == {"text", "report", "documents", "lifetime"}


@pytest.mark.parametrize("args, key, code, words", [
    (["vault", "list"], "not-a-key", EXIT_USAGE, ["401 unauthorized", "$TOKENDP_KEY"]),
    (["vault", "rewrite", "nope", "--epsilon", "3"], "reader", EXIT_BAD_INPUT, ["404 not_found", "vault list"]),
    (["vault", "rewrite", "draft", "--epsilon", "3"], "reader", EXIT_BAD_INPUT, ["404 not_found"]),
    (["vault", "rewrite", "a", "--epsilon", "3"], "stranger", EXIT_BAD_INPUT, ["404 not_found"]),
    (["vault", "ask", "zebra quantum", "--epsilon", "3"], "reader", EXIT_BAD_INPUT, ["404 no_match"]),
    (["vault", "rewrite", "a", "--epsilon", "-1"], "reader", EXIT_USAGE, ["query.epsilon", "422 invalid_request"]),
    (["vault", "rewrite", "a", "--epsilon", "3", "--max-new-tokens", "99"], "reader", EXIT_USAGE,
     ["server's limit of 16", "400 invalid_parameter"]),
    (["vault", "rewrite", "a", "--epsilon", "3", "--max-new-tokens", "2"], "spent", EXIT_BUDGET,
     ["429 quota_exceeded", "nothing was charged"]),
])
def test_each_refusal_is_a_clear_message_and_the_clis_exit_code(vault, args, key, code, words):
    res = run(vault, *args, key=key)
    assert res.exit_code == code, res.output
    assert res.stderr.splitlines()[-1].startswith("Error: ") and all(w in res.stderr for w in words), res.stderr
    assert "Traceback" not in res.output and res.stdout == ""
    as_json = run(vault, *args, "--json", key=key)
    error = json.loads(as_json.stderr.splitlines()[-1])["error"]
    assert as_json.exit_code == error["exit_code"] == code and words[0] in error["message"]


def test_a_server_that_is_not_there_is_exit_code_6_naming_the_url():
    url = f"http://127.0.0.1:{free_port()}"
    res = CliRunner().invoke(main, ["vault", "list", "--url", url], env={"TOKENDP_KEY": "k" * 20})
    assert res.exit_code == EXIT_SERVICE
    assert f"is `tokendp serve` running at {url}?" in res.stderr and "k" * 20 not in res.output


def test_the_key_comes_from_the_environment_or_a_file_and_is_never_echoed(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    none = CliRunner().invoke(main, ["vault", "list", "--url", url], env={"TOKENDP_KEY": ""})
    assert none.exit_code == EXIT_USAGE and "set $TOKENDP_KEY, or pass --key-file" in none.stderr
    missing = CliRunner().invoke(main, ["vault", "list", "--url", url, "--key-file", tmp_path / "nope"])
    assert missing.exit_code == EXIT_BAD_INPUT and "cannot read --key-file" in missing.stderr
    bad = tmp_path / "bad.key"
    bad.write_text("secret one\nsecret two\n")
    bad.chmod(0o644)
    res = CliRunner().invoke(main, ["vault", "list", "--url", url, "--key-file", bad])
    assert res.exit_code == EXIT_BAD_INPUT and "one API key on one line" in res.stderr
    assert "can be read by other users (mode 644)" in res.stderr and "secret" not in res.output
    wrong = CliRunner().invoke(main, ["vault", "list", "--url", "ftp://host"], env={"TOKENDP_KEY": "k" * 20})
    assert wrong.exit_code == EXIT_USAGE and "--url must be http(s)://HOST[:PORT]" in wrong.stderr
    far = CliRunner().invoke(main, ["vault", "list", "--url", "http://host.invalid:9", "--timeout", "5"],
                             env={"TOKENDP_KEY": "k" * 20})
    assert "the key goes to host.invalid unencrypted: use https" in far.stderr and far.exit_code == EXIT_SERVICE


def test_a_redirect_is_not_followed_with_the_key():
    """urllib would send the Authorization header on to wherever a redirect points."""
    heard: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            heard.append(self.headers.get("Authorization"))
            if self.path.startswith("/v1/"):
                self.send_response(302)
                self.send_header("Location", f"http://127.0.0.1:{self.server.server_port}/elsewhere")
            else:
                self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        res = CliRunner().invoke(main, ["vault", "list", "--url", f"http://127.0.0.1:{server.server_port}"],
                                 env={"TOKENDP_KEY": "k" * 20})
    finally:
        server.shutdown()
    assert res.exit_code == EXIT_ERROR and "redirect (302)" in res.stderr
    assert heard == ["Bearer " + "k" * 20]  # once, to the address given


@pytest.mark.parametrize("status, body, retry, code, words", [
    (403, {"error": {"code": "forbidden", "message": "this route needs an owner key"}}, None, EXIT_USAGE,
     "this route needs an owner key (403 forbidden)"),
    (429, {"error": {"code": "rate_limited", "message": "too many requests"}}, "7", EXIT_SERVICE,
     "too many requests (429 rate_limited); retry in 7 s"),
    (503, {"error": {"code": "ticket_lapsed", "message": "ask again"}}, "1", EXIT_SERVICE, "ask again (503"),
    (None, {"error": {"code": "internal_error", "message": "internal error; the reservation stays spent",
                      "charged": True}}, None, EXIT_SERVICE, "reservation stays spent (internal_error)"),
    (400, {"error": {"code": "invalid_input", "message": "longer than the model's context"}}, None, EXIT_BAD_INPUT,
     "(400 invalid_input)"),
    (502, "<html>bad gateway</html>", None, EXIT_SERVICE, "without tokendp's error body"),
    (405, {"error": {"code": "method_not_allowed", "message": "no"}}, None, EXIT_ERROR, "no (405 method_not_allowed)"),
])
def test_the_codes_the_commands_cannot_provoke_map_by_their_class(status, body, retry, code, words):
    """403 (an owner's route), rate limits, a lapsed ticket, a stream's error event (no status)."""
    err = refusal(status, body, retry)
    assert err.exit_code == code and words in err.format_message()


def test_help_names_the_key_sources_and_no_option_takes_the_key():
    for command in ("list", "rewrite", "ask"):
        res = CliRunner().invoke(main, ["vault", command, "--help"])
        assert res.exit_code == 0
        text = " ".join(res.output.split())
        assert "$TOKENDP_KEY" in text and "--key-file" in text and "--url" in text and "--json" in text
        assert "--key " not in text and "--api-key" not in text
    group = " ".join(CliRunner().invoke(main, ["vault", "--help"]).output.split())
    assert "tokendp vault list, rewrite and ask" in group and "ask Ask a question" in group
