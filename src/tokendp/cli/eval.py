"""`tokendp eval`: measure taggers, sanitizers and private prediction. Each evaluation adds its sub-command here."""

from __future__ import annotations

import click

from tokendp.cli.eval_tagger import eval_tagger


@click.group("eval", short_help="Evaluate taggers, sanitizers, synthesis, prediction, fine-tuning.")
def eval_group() -> None:
    """Evaluate taggers, sanitizers, synthetic text, the prompt-injection defence, private
    prediction and fine-tuned models on benchmark data."""


eval_group.add_command(eval_tagger)

from tokendp.cli.eval_sanitize import eval_sanitize  # noqa: E402

eval_group.add_command(eval_sanitize)

from tokendp.cli.eval_finetune import eval_exposure, eval_finetune  # noqa: E402

eval_group.add_command(eval_exposure)
eval_group.add_command(eval_finetune)

from tokendp.cli.eval_predict import eval_predict  # noqa: E402

eval_group.add_command(eval_predict)

from tokendp.cli.eval_injection import eval_injection  # noqa: E402

eval_group.add_command(eval_injection)

from tokendp.cli.eval_synthesize import eval_synthesize  # noqa: E402

eval_group.add_command(eval_synthesize)
