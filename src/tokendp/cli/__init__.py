"""The `tokendp` command line: a thin shell over the library.

Each sub-command lives in its own module and is registered here. Errors from the
library (`tokendp.errors`) become the exit codes of `tokendp.cli._exit` with their message
(one JSON line on stderr under --json); no privacy logic here.
"""

from __future__ import annotations

import click

from tokendp import __version__
from tokendp.cli._console import add_global_options, no_color, report_conversion
from tokendp.cli._exit import JSONErrorGroup, exit_codes_epilog
from tokendp.malloc import keep_freed_memory
from tokendp.openmp import sleeping_openmp
from tokendp.models.cache import report_conversions


@click.group(cls=JSONErrorGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=exit_codes_epilog())
@click.version_option(__version__, prog_name="tokendp")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Token-level differential privacy for large language models.

    Rewrite documents (sanitize), answer a prompt from private and untrusted context
    (generate), generate synthetic text (synthesize), answer prompts from an ensemble
    fine-tuned on private shards (ensemble train, predict), fine-tune with DP-SGD or ATDP
    (finetune), tag PII (tag), and compute privacy budgets (account), each with a formal
    (epsilon, delta) guarantee; or run all of it as a service with a durable budget per
    document and privacy group (serve, keys), and a vault of stored documents where every
    person has one lifetime budget (vault).

    -q, -v and --progress go before or after the subcommand; NO_COLOR turns colour off.
    """
    no_color(ctx)
    sleeping_openmp()  # before torch loads: waiting threads sleep instead of spinning (tokendp.openmp)
    ctx.with_resource(report_conversions(report_conversion))  # SmolLM2's first load, in the CLI's style
    keep_freed_memory()  # per-step buffers are reused instead of re-faulted (tokendp.malloc)


from tokendp.cli.account import account  # noqa: E402
from tokendp.cli.ensemble import ensemble  # noqa: E402
from tokendp.cli.eval import eval_group  # noqa: E402
from tokendp.cli.finetune import finetune  # noqa: E402
from tokendp.cli.generate import generate  # noqa: E402
from tokendp.cli.model import model  # noqa: E402
from tokendp.cli.predict import predict  # noqa: E402
from tokendp.cli.sanitize import sanitize  # noqa: E402
from tokendp.cli.serve import keys, serve  # noqa: E402
from tokendp.cli.synthesize import synthesize  # noqa: E402
from tokendp.cli.tag import tag  # noqa: E402
from tokendp.cli.vault import vault  # noqa: E402

for _command in (sanitize, generate, synthesize, ensemble, predict, finetune, tag, account, model, eval_group,
                 serve, keys, vault):
    main.add_command(_command)
add_global_options(main)
