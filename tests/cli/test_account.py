"""`tokendp account`: the issue-2 contract (keys, values, table output, exit code 2)."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from tokendp import accounting as acc
from tokendp.cli import main
from tokendp.cli.account import account


def _run(*args: str):
    return CliRunner().invoke(main, ["account", *args])


def _json(*args: str) -> dict:
    result = _run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_dp_fusion_epsilon_json():
    out = _json("dp-fusion", "--alpha", "2", "--beta", "0.005", "--groups", "1", "--max-new-tokens", "900", "--delta", "1e-3")
    assert set(out) == {"mechanism", "alpha", "alpha_source", "beta", "cap", "groups", "max_new_tokens", "delta",
                        "rdp_per_token", "epsilon", "max_tokens", "deprecated_keys"}
    assert out["mechanism"] == "dp-fusion"
    assert out["cap"] == pytest.approx(0.01)
    assert out["epsilon"] == pytest.approx(14.5215, abs=1e-4)


def test_dp_fusion_calibration_json():
    out = _json("dp-fusion", "--alpha", "2", "--epsilon", "20", "--groups", "4", "--max-new-tokens", "500", "--delta", "1e-5")
    assert out["beta"] == pytest.approx(acc.dp_fusion_beta(epsilon=20.0, alpha=2.0, groups=4, max_tokens=500, delta=1e-5))
    assert out["epsilon"] == pytest.approx(20.0, rel=1e-9)


def test_invisibleink_both_ways():
    out = _json("invisibleink", "--clip", "1.5", "--references-per-text", "8", "--temperature", "1.2", "--max-new-tokens", "300", "--delta", "1e-6")
    assert set(out) == {"mechanism", "clip", "references_per_text", "temperature", "max_new_tokens", "delta", "rho",
                        "epsilon", "batch_size", "max_tokens", "deprecated_keys"}
    assert out["rho"] == pytest.approx(300 * 1.5**2 / (2 * 64 * 1.44))
    back = _json("invisibleink", "--epsilon", str(out["epsilon"]), "--references-per-text", "8", "--temperature", "1.2", "--max-new-tokens", "300", "--delta", "1e-6")
    assert back["clip"] == pytest.approx(1.5, rel=1e-9)


def test_amin_both_ways_with_and_without_the_switch():
    plain = _json("amin", "--epsilon", "6", "--references-per-text", "8", "--temperature", "1", "--max-new-tokens", "100", "--delta", "1e-6")
    assert set(plain) == {"mechanism", "clip", "references_per_text", "temperature", "max_new_tokens", "delta", "rho",
                          "epsilon", "batch_size", "max_tokens", "deprecated_keys"}
    assert plain["clip"] == acc.amin_clip(epsilon=6.0, delta=1e-6, batch_size=8, temperature=1.0, max_tokens=100)
    assert plain["rho"] == pytest.approx(100 * 2 * plain["clip"] ** 2 / 64)
    switch_args = ("--references-per-text", "8", "--temperature", "1", "--max-new-tokens", "100", "--delta", "1e-6",
                   "--svt-epsilon", "1", "--max-private-tokens", "25")
    switch = _json("amin", "--epsilon", "6", *switch_args)
    assert set(switch) == set(plain) - {"rho"} | {"svt_epsilon", "max_private_tokens", "rho_private_tokens",
                                                   "svt_grid", "threshold_noise", "query_noise"}
    assert switch["epsilon"] == pytest.approx(6.0, rel=1e-9) and switch["clip"] > plain["clip"]
    grid, t1, t2 = acc.amin_switch_discrete_noise(svt_epsilon=1.0, max_private_tokens=25, clip=switch["clip"], batch_size=8)
    assert (switch["svt_grid"], switch["threshold_noise"], switch["query_noise"]) == (grid, grid * t1, grid * t2)
    continuous = acc.amin_switch_noise(svt_epsilon=1.0, max_private_tokens=25, clip=switch["clip"], batch_size=8)
    assert all(c <= d <= c * 1.02 for c, d in zip(continuous, (grid * t1, grid * t2)))  # the grid costs < 2%
    back = _json("amin", "--clip", str(switch["clip"]), *switch_args)
    assert back["epsilon"] == switch["epsilon"]
    for extra in (("--svt-epsilon", "1"), ("--svt-epsilon", "1", "--max-private-tokens", "101")):
        result = _run("amin", "--clip", "1", "--references-per-text", "8", "--temperature", "1", "--max-new-tokens", "100",
                      "--delta", "1e-6", *extra)
        assert result.exit_code == 2 and "max-private-tokens" in result.output


def test_baselines_and_convert():
    decoding = _json("dp-decoding", "--lam", "0.5", "--vocab-size", "100", "--max-new-tokens", "10")
    assert decoding["epsilon"] == pytest.approx(10 * decoding["epsilon_per_token"])
    prompt = _json("dp-prompt", "--clip-width", "4", "--temperature", "2", "--max-new-tokens", "10")
    assert prompt["epsilon_per_token"] == pytest.approx(4.0) and prompt["epsilon"] == pytest.approx(40.0)
    assert _json("convert", "--rdp", "9", "--alpha", "2", "--delta", "1e-3")["epsilon"] == pytest.approx(14.5215, abs=1e-4)
    assert _json("convert", "--rho", "1", "--delta", "1e-5")["epsilon"] == pytest.approx(acc.zcdp_to_epsilon(rho=1.0, delta=1e-5))


def test_table_output_is_readable():
    result = _run("dp-fusion", "--alpha", "2", "--beta", "0.005", "--groups", "1", "--max-new-tokens", "900", "--delta", "1e-3")
    assert result.exit_code == 0
    assert "epsilon" in result.output and "14.52" in result.output and "{" not in result.output


@pytest.mark.parametrize("args", [
    ["dp-fusion", "--alpha", "1", "--beta", "0.01", "--groups", "1", "--max-new-tokens", "10", "--delta", "1e-5"],
    ["dp-fusion", "--alpha", "2", "--beta", "-0.01", "--groups", "1", "--max-new-tokens", "10", "--delta", "1e-5"],
    ["dp-fusion", "--alpha", "2", "--beta", "0.01", "--groups", "0", "--max-new-tokens", "10", "--delta", "1e-5"],
    ["dp-fusion", "--alpha", "2", "--beta", "0.01", "--groups", "1", "--max-new-tokens", "0", "--delta", "1e-5"],
    ["dp-fusion", "--alpha", "2", "--beta", "0.01", "--groups", "1", "--max-new-tokens", "10", "--delta", "1"],
    ["dp-fusion", "--alpha", "2", "--groups", "1", "--max-new-tokens", "10", "--delta", "1e-5"],
    ["dp-fusion", "--alpha", "2", "--beta", "0.1", "--epsilon", "3", "--groups", "1", "--max-new-tokens", "10", "--delta", "1e-5"],
    ["invisibleink", "--clip", "-1", "--references-per-text", "8", "--temperature", "1", "--max-new-tokens", "10", "--delta", "1e-5"],
    ["dp-decoding", "--lam", "1", "--vocab-size", "10", "--max-new-tokens", "10"],
    ["dp-prompt", "--clip-width", "1", "--temperature", "0", "--max-new-tokens", "10"],
    ["convert", "--rdp", "1", "--delta", "1e-5"],
    ["convert", "--rho", "1", "--rdp", "1", "--alpha", "2", "--delta", "1e-5"],
    ["convert", "--rho", "1", "--delta", "0"],
])
def test_invalid_parameters_exit_2_with_a_message(args):
    result = _run(*args)
    assert result.exit_code == 2
    assert "Error" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", ["dp-fusion", "invisibleink", "dp-decoding", "dp-prompt", "convert", "dpsgd"])
def test_help_explains_every_parameter(command):
    result = _run(command, "--help")
    assert result.exit_code == 0
    options = [p for p in account.commands[command].params if isinstance(p, click.Option) and not p.hidden]
    assert options and all(len(option.help or "") > 15 for option in options)
    assert all(option.opts[0] in result.output for option in options)


def test_pmixed_both_directions():
    common = ("--alpha", "3", "--ensemble-size", "80", "--sample-rate", "0.03", "--queries", "1024", "--delta", "1e-5")
    forward = _json("pmixed", "--beta", "0.1", *common)
    assert forward["epsilon"] == pytest.approx(
        acc.pmixed_epsilon(alpha=3.0, beta=0.1, ensemble_size=80, sample_rate=0.03, max_tokens=1024, delta=1e-5))
    back = _json("pmixed", "--epsilon", "8", *common)
    assert back["epsilon"] <= 8.0 and back["beta"] == pytest.approx(0.2189, abs=1e-3)
    assert _run("pmixed", "--beta", "0.1", "--epsilon", "8", *common).exit_code == 2
    bad = list(common)
    bad[bad.index("--sample-rate") + 1] = "3"
    assert _run("pmixed", "--beta", "0.1", *bad).exit_code == 2


def test_dpsgd_both_directions_agree_with_opacus():
    common = ("--sample-rate", "0.01", "--steps", "1000", "--delta", "1e-5")
    rdp = _json("dpsgd", "--noise-multiplier", "1.1", "--accountant", "rdp", *common)
    opacus_rdp = pytest.importorskip("opacus.accountants.rdp")
    accountant = opacus_rdp.RDPAccountant()
    accountant.history = [(1.1, 0.01, 1000)]
    assert rdp["accountant"] == "rdp"
    assert rdp["epsilon"] == pytest.approx(accountant.get_epsilon(delta=1e-5, alphas=list(acc.INTEGER_ORDERS)), rel=1e-9)
    pld = _json("dpsgd", "--noise-multiplier", "1.1", *common)  # the default: Opacus's PRV accountant gives 1.525 (upper)
    assert pld["accountant"] == "pld" and 1.51 < pld["epsilon"] <= 1.5255
    short = ("--sample-rate", "0.01", "--steps", "200", "--delta", "1e-5")
    back = _json("dpsgd", "--epsilon", "1", *short)
    back_rdp = _json("dpsgd", "--epsilon", "1", "--accountant", "rdp", *short)
    assert back["epsilon"] <= 1.0 and back_rdp["epsilon"] <= 1.0 and back["noise_multiplier"] < back_rdp["noise_multiplier"]
    assert _run("dpsgd", "--sample-rate", "0.01", "--steps", "1000", "--delta", "1e-5").exit_code == 2
    assert _run("dpsgd", "--sample-rate", "2", "--noise-multiplier", "1", "--steps", "10", "--delta", "1e-5").exit_code == 2


def test_json_speaks_the_cli_words_and_keeps_the_old_keys_one_release():
    """Issue 33, item 8: T and B under the flags' names; the old keys stay, said deprecated."""
    res = CliRunner().invoke(main, ["account", "invisibleink", "--epsilon", "10", "--references-per-text", "8",
                                    "--temperature", "1", "--max-new-tokens", "100", "--delta", "1e-5", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["references_per_text"] == out["batch_size"] == 8 and out["max_new_tokens"] == out["max_tokens"] == 100
    assert out["deprecated_keys"] == {"batch_size": "references_per_text", "max_tokens": "max_new_tokens"}
    readable = CliRunner().invoke(main, ["account", "dp-decoding", "--lam", "0.9", "--vocab-size", "100",
                                         "--max-new-tokens", "10"])
    assert "max_new_tokens" in readable.output and "max_tokens " not in readable.output


def test_a_beta_retyped_from_the_readable_report_never_certifies_more():
    """The readable table rounds beta down (it printed 0.0344 for 0.034412..., whose retyping
    certified 8.0003 against a target of 8)."""
    from tokendp.cli.sanitize import _fmt_down

    for groups, tokens in ((6, 186), (1, 900), (3, 50)):
        beta = acc.dp_fusion_beta(epsilon=8, alpha=3.5, groups=groups, max_tokens=tokens, delta=1e-5)
        shown = float(_fmt_down(beta))
        assert shown <= beta and acc.dp_fusion_epsilon(alpha=3.5, beta=shown, groups=groups, max_tokens=tokens,
                                                       delta=1e-5) <= 8
