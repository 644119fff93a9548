"""`tokendp account`: what epsilon do I get, and what parameter do I need?

A thin shell over :mod:`tokendp.accounting`; every number comes from the library. The output's
keys are the command line's words (``max_new_tokens`` is T, ``references_per_text`` is B); the
accounting functions' older names ``max_tokens`` and ``batch_size`` stay beside them in the JSON
for one release, listed under ``deprecated_keys``. Where the Renyi order alpha is not given, it is chosen
from the public parameters as ``sanitize`` and ``predict`` choose it, and ``alpha_source`` says so.
"""

from __future__ import annotations

from collections.abc import Mapping

import click

from tokendp import accounting
from tokendp.cli._common import CLIError, echo_json, library_errors, renamed
from tokendp.jobs._renamed import RENAMED_KEYS, with_cli_keys

_JSON = click.option("--json", "as_json", is_flag=True, help="Print one JSON object (indented) instead of a table.")
_OLD_MAX_TOKENS = renamed("--max-tokens", "max_tokens")
_OLD_BATCH_SIZE = renamed("--batch-size", "batch_size")
_MAX_TOKENS = click.option(
    "--max-new-tokens", "max_tokens", type=int, required=True,
    help="T: the maximum number of new tokens, fixed before generation. Every token counts; stopping early does not lower epsilon.",
)
_DELTA = click.option(
    "--delta", type=float, required=True,
    help="The failure probability of the (epsilon, delta) guarantee, strictly between 0 and 1 (typically below 1/number of people).",
)


def _emit(result: Mapping[str, object], as_json: bool) -> None:
    if as_json:
        echo_json(with_cli_keys(dict(result)))
        return
    result = {RENAMED_KEYS.get(k, k): v for k, v in result.items()}
    width = max(len(key) for key in result)
    for key, value in result.items():
        text = f"{value:.6g}" if isinstance(value, float) else str(value)
        click.echo(f"{key:<{width}}  {text}")


def _exactly_one(**named: object) -> None:
    given = [name for name, value in named.items() if value is not None]
    if len(given) != 1:
        flags = " or ".join("--" + name.replace("_", "-") for name in named)
        raise CLIError(f"give exactly one of {flags}")


@click.group("account", short_help="Privacy budgets: the epsilon of parameters, or the reverse.")
def account() -> None:
    """Compute privacy budgets: the epsilon of given parameters, or the parameter for a target epsilon."""


def _order(alpha: float | None, choose, default: float) -> tuple[float, str]:
    """``alpha`` and where it came from: given; else ``choose()`` (the best order for the target
    epsilon, from public parameters only); else, with a cap instead of a target, ``default``."""
    if alpha is not None:
        return alpha, "given"
    if choose is not None:
        return choose(), "chosen: the best order for --epsilon, from public parameters only"
    return default, f"default with --beta ({default:g})"


@account.command("dp-fusion", short_help="DP-Fusion: epsilon per group for a cap beta, or beta for a target.")
@_OLD_MAX_TOKENS
@click.option("--alpha", type=float, default=None,
              help="Renyi order alpha (> 1) at which DP-Fusion is analysed [default: with --epsilon the best order, "
                   "as sanitize chooses it; 2 with --beta, as sanitize uses].")
@click.option("--beta", type=float, help="The paper's beta (>= 0): each token's divergence cap per group is alpha*beta.")
@click.option("--epsilon", type=float, help="Target epsilon per group; prints the largest beta that meets it.")
@click.option("--groups", type=int, required=True, help="Number of privacy groups m mixed at each step (>= 1).")
@_MAX_TOKENS
@_DELTA
@_JSON
@library_errors
def dp_fusion(alpha, beta, epsilon, groups, max_tokens, delta, as_json) -> None:
    """DP-Fusion: epsilon per privacy group for a per-token cap alpha*beta (or beta for a target epsilon)."""
    _exactly_one(beta=beta, epsilon=epsilon)
    from tokendp.accounting.mechanisms import dp_fusion_alpha

    alpha, source = _order(alpha, None if epsilon is None else
                           lambda: dp_fusion_alpha([(epsilon, groups, max_tokens)], delta=delta), 2.0)
    if beta is None:
        beta = accounting.dp_fusion_beta(epsilon=epsilon, alpha=alpha, groups=groups, max_tokens=max_tokens, delta=delta)
    _emit({
        "mechanism": "dp-fusion", "alpha": alpha, "alpha_source": source, "beta": beta, "cap": alpha * beta,
        "groups": groups, "max_tokens": max_tokens, "delta": delta,
        "rdp_per_token": accounting.dp_fusion_rdp_per_token(alpha=alpha, beta=beta, groups=groups),
        "epsilon": accounting.dp_fusion_epsilon(alpha=alpha, beta=beta, groups=groups, max_tokens=max_tokens, delta=delta),
    }, as_json)


@account.command("pmixed", short_help="PMixED: epsilon per shard for a cap beta, or beta for a target.")
@click.option("--alpha", type=float, default=None,
              help="Renyi order alpha (> 1) at which PMixED is analysed [default: with --epsilon the best order, as "
                   "predict chooses it; 3 with --beta, as predict uses].")
@click.option("--beta", type=float, help="Per-member cap (>= 0) on the symmetric divergence of each mollified member to the public model.")
@click.option("--epsilon", type=float, help="Target epsilon per shard; prints the largest beta that meets it.")
@click.option("--ensemble-size", type=int, required=True, help="N: ensemble members, one per shard (>= 1).")
@click.option("--sample-rate", type=float, required=True, help="q: each member joins a token's sample with this probability (Poisson, in [0, 1]).")
@click.option("--queries", "max_tokens", type=int, required=True,
              help="T: predicted tokens answered in all, fixed in advance. Every token counts.")
@_DELTA
@_JSON
@library_errors
def pmixed(alpha, beta, epsilon, ensemble_size, sample_rate, max_tokens, delta, as_json) -> None:
    """PMixED: epsilon per shard for a per-member cap beta (or beta for a target epsilon).

    Adjacency: the corpora differ in one shard's data, so that member is the public model on the
    neighbour; the bound is log(1 + w (e^((alpha-1) beta) - 1))/(alpha-1) per token with
    w = (1 - (1 - q)^N)/N (proof: docs/privacy.md, "PMixED").
    """
    _exactly_one(beta=beta, epsilon=epsilon)
    public = {"ensemble_size": ensemble_size, "sample_rate": sample_rate}
    alpha, source = _order(alpha, None if epsilon is None else lambda: accounting.pmixed_alpha(
        epsilon=epsilon, max_tokens=max_tokens, delta=delta, **public), 3.0)
    params = {"alpha": alpha, **public}
    if beta is None:
        beta = accounting.pmixed_beta(epsilon=epsilon, max_tokens=max_tokens, delta=delta, **params)
    _emit({
        "mechanism": "pmixed", **params, "alpha_source": source, "beta": beta, "queries": max_tokens, "delta": delta,
        "rdp_per_token": accounting.pmixed_rdp_per_token(beta=beta, **params),
        "epsilon": accounting.pmixed_epsilon(beta=beta, max_tokens=max_tokens, delta=delta, **params),
    }, as_json)


@account.command("dpsgd", short_help="DP-SGD: epsilon per record for a noise multiplier, or the reverse.")
@click.option("--sample-rate", type=float, required=True, help="q: each record joins a step's batch with this probability (Poisson; batch / N).")
@click.option("--noise-multiplier", type=float, help="sigma: the noise std as a multiple of the clip norm (> 0).")
@click.option("--epsilon", type=float, help="Target epsilon per record; prints the smallest noise multiplier that meets it.")
@click.option("--steps", type=int, required=True, help="Number of noisy steps (epochs * steps per epoch).")
@click.option("--accountant", type=click.Choice(accounting.ACCOUNTANTS), default=accounting.DEFAULT_ACCOUNTANT, show_default=True,
              help="pld: privacy loss distribution (Google dp-accounting; near-exact, as Opacus's PRV accountant); "
                   "rdp: Renyi DP at integer orders (as Opacus's RDPAccountant; looser).")
@_DELTA
@_JSON
@library_errors
def dpsgd(sample_rate, noise_multiplier, epsilon, steps, accountant, delta, as_json) -> None:
    """DP-SGD: epsilon per record for a noise multiplier (or the multiplier for a target epsilon).

    Add/remove adjacency; the Poisson-subsampled Gaussian composed over the steps, by its privacy
    loss distribution (pld, the default, what tokendp finetune certifies) or its RDP at integer
    orders 2..1024 (rdp, equal to Opacus's RDPAccountant at those orders; docs/privacy.md).
    """
    _exactly_one(noise_multiplier=noise_multiplier, epsilon=epsilon)
    if noise_multiplier is None:
        noise_multiplier = accounting.calibrate_noise_multiplier(epsilon=epsilon, delta=delta, sampling_rate=sample_rate,
                                                                 steps_per_epoch=steps, multipliers=[1.0], accountant=accountant)
    _emit({
        "mechanism": "dpsgd", "sample_rate": sample_rate, "noise_multiplier": noise_multiplier, "steps": steps, "delta": delta,
        "accountant": accountant,
        "epsilon": accounting.schedule_epsilon(noise_multiplier=noise_multiplier, multipliers=[1.0], steps_per_epoch=steps,
                                               sampling_rate=sample_rate, delta=delta, accountant=accountant),
    }, as_json)


@account.command("invisibleink", short_help="InvisibleInk: epsilon per reference for a clip C, or C for a target.")
@_OLD_MAX_TOKENS
@_OLD_BATCH_SIZE
@click.option("--clip", type=float, help="Clip C (>= 0) on each reference's logit difference from the public logits.")
@click.option("--epsilon", type=float, help="Target epsilon per reference; prints the largest clip C that meets it.")
@click.option("--references-per-text", "batch_size", type=int, required=True,
              help="B: private references averaged per token (>= 1), as in synthesize.")
@click.option("--temperature", type=float, required=True, help="Sampling temperature tau (> 0).")
@_MAX_TOKENS
@_DELTA
@_JSON
@library_errors
def invisibleink(clip, epsilon, batch_size, temperature, max_tokens, delta, as_json) -> None:
    """InvisibleInk: epsilon per reference for a clip C (or C for a target epsilon), via zCDP."""
    _exactly_one(clip=clip, epsilon=epsilon)
    if clip is None:
        clip = accounting.invisibleink_clip(epsilon=epsilon, delta=delta, batch_size=batch_size, temperature=temperature, max_tokens=max_tokens)
    rho = accounting.compose_zcdp([accounting.invisibleink_rho_per_token(clip=clip, batch_size=batch_size,
                                                                          temperature=temperature)], [max_tokens])
    _emit({
        "mechanism": "invisibleink", "clip": clip, "batch_size": batch_size, "temperature": temperature,
        "max_tokens": max_tokens, "delta": delta, "rho": rho,
        "epsilon": accounting.invisibleink_epsilon(clip=clip, batch_size=batch_size, temperature=temperature, max_tokens=max_tokens, delta=delta),
    }, as_json)


@account.command("amin", short_help="Amin et al. (2024): epsilon per reference for a clip C, or the reverse.")
@_OLD_MAX_TOKENS
@_OLD_BATCH_SIZE
@click.option("--clip", type=float, help="Clip C (> 0) on each reference's centred logits.")
@click.option("--epsilon", type=float, help="Target epsilon per reference; prints the largest clip C that meets it.")
@click.option("--references-per-text", "batch_size", type=int, required=True,
              help="B: private references averaged per token (>= 1), as in synthesize.")
@click.option("--temperature", type=float, required=True, help="Sampling temperature tau (> 0).")
@click.option("--svt-epsilon", type=float, help="The sparse-vector switch's pure-DP share (turns the switch on).")
@click.option("--max-private-tokens", type=int, help="With the switch: c, the most private tokens per text (1 to T).")
@_MAX_TOKENS
@_DELTA
@_JSON
@library_errors
def amin(clip, epsilon, batch_size, temperature, svt_epsilon, max_private_tokens, max_tokens, delta, as_json) -> None:
    """Amin et al. 2024: epsilon per reference for a clip C (or C for a target epsilon), with or without the switch."""
    _exactly_one(clip=clip, epsilon=epsilon)
    if (svt_epsilon is None) != (max_private_tokens is None):
        raise CLIError("the switch needs both --svt-epsilon and --max-private-tokens (or neither)")
    common = {"batch_size": batch_size, "temperature": temperature}
    if svt_epsilon is None:
        if clip is None:
            clip = accounting.amin_clip(epsilon=epsilon, delta=delta, max_tokens=max_tokens, **common)
        _emit({
            "mechanism": "amin", "clip": clip, **common, "max_tokens": max_tokens, "delta": delta,
            "rho": accounting.compose_zcdp([accounting.amin_rho_per_token(clip=clip, **common)], [max_tokens]),
            "epsilon": accounting.amin_epsilon(clip=clip, max_tokens=max_tokens, delta=delta, **common),
        }, as_json)
        return
    if not 1 <= max_private_tokens <= max_tokens:
        raise CLIError(f"--max-private-tokens must be from 1 to --max-new-tokens ({max_tokens}), got {max_private_tokens}")
    switch = {"max_private_tokens": max_private_tokens, "svt_epsilon": svt_epsilon}
    if clip is None:
        clip = accounting.amin_switch_clip(epsilon=epsilon, delta=delta, **common, **switch)
    grid, threshold_steps, query_steps = accounting.amin_switch_discrete_noise(clip=clip, batch_size=batch_size, **switch)
    _emit({
        "mechanism": "amin", "clip": clip, **common, "max_tokens": max_tokens, "delta": delta, **switch,
        "rho_private_tokens": accounting.compose_zcdp([accounting.amin_rho_per_token(clip=clip, **common)],
                                                      [max_private_tokens]),
        "svt_grid": grid, "threshold_noise": grid * threshold_steps, "query_noise": grid * query_steps,
        "epsilon": accounting.amin_switch_epsilon(clip=clip, delta=delta, **common, **switch),
    }, as_json)


@account.command("dp-decoding", short_help="DP-Decoding: pure epsilon of mixing with the uniform distribution.")
@_OLD_MAX_TOKENS
@click.option("--lam", type=float, required=True, help="Weight lambda in [0, 1) of the private model; the rest is uniform.")
@click.option("--vocab-size", type=int, required=True, help="Vocabulary size V (>= 1).")
@_MAX_TOKENS
@_JSON
@library_errors
def dp_decoding(lam, vocab_size, max_tokens, as_json) -> None:
    """DP-Decoding: pure epsilon of mixing with the uniform distribution, linear in T."""
    per_token = accounting.dp_decoding_epsilon_per_token(lam=lam, vocab_size=vocab_size)
    _emit({
        "mechanism": "dp-decoding", "lam": lam, "vocab_size": vocab_size, "max_tokens": max_tokens,
        "epsilon_per_token": per_token,
        "epsilon": accounting.dp_decoding_epsilon(lam=lam, vocab_size=vocab_size, max_tokens=max_tokens),
    }, as_json)


@account.command("dp-prompt")
@_OLD_MAX_TOKENS
@click.option("--clip-width", type=float, required=True, help="Width w (>= 0) of the interval the logits are clipped to.")
@click.option("--temperature", type=float, required=True, help="Sampling temperature tau (> 0).")
@_MAX_TOKENS
@_JSON
@library_errors
def dp_prompt(clip_width, temperature, max_tokens, as_json) -> None:
    """DP-Prompt: pure epsilon 2w/tau per token, linear in T."""
    _emit({
        "mechanism": "dp-prompt", "clip_width": clip_width, "temperature": temperature, "max_tokens": max_tokens,
        "epsilon_per_token": accounting.dp_prompt_epsilon_per_token(clip_width=clip_width, temperature=temperature),
        "epsilon": accounting.dp_prompt_epsilon(clip_width=clip_width, temperature=temperature, max_tokens=max_tokens),
    }, as_json)


@account.command("convert")
@click.option("--rdp", type=float, help="An RDP value (>= 0) at order --alpha, e.g. a total over all tokens.")
@click.option("--alpha", type=float, help="The Renyi order (> 1) of --rdp.")
@click.option("--rho", type=float, help="A zCDP rho (>= 0); converted at the best order.")
@_DELTA
@_JSON
@library_errors
def convert(rdp, alpha, rho, delta, as_json) -> None:
    """Convert RDP at one order, or zCDP, to (epsilon, delta)."""
    if rho is not None and (rdp is not None or alpha is not None):
        raise CLIError("give either --rho, or --rdp with --alpha, not both")
    if rho is not None:
        result = {"rho": rho, "delta": delta, "epsilon": accounting.zcdp_to_epsilon(rho=rho, delta=delta)}
    elif rdp is not None and alpha is not None:
        result = {"rdp": rdp, "alpha": alpha, "delta": delta, "epsilon": accounting.rdp_to_epsilon(rdp=rdp, orders=alpha, delta=delta)}
    else:
        raise CLIError("give --rho, or both --rdp and --alpha")
    _emit(result, as_json)
