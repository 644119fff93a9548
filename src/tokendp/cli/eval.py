"""`tokendp eval`: measure taggers and sanitizers. Each evaluation adds its sub-command here."""

from __future__ import annotations

import click

from tokendp.cli.eval_tagger import eval_tagger


@click.group("eval")
def eval_group() -> None:
    """Evaluate taggers, sanitizers and synthetic text on benchmark data."""


eval_group.add_command(eval_tagger)

from tokendp.cli.eval_sanitize import eval_sanitize  # noqa: E402

eval_group.add_command(eval_sanitize)

from tokendp.cli.eval_synthesize import eval_synthesize  # noqa: E402

eval_group.add_command(eval_synthesize)
