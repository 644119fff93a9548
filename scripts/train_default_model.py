"""Train, resume, smoke-test or export tokendp's embedded default model.

  python scripts/train_default_model.py --out runs/model            # train / resume
  python scripts/train_default_model.py --out runs/model --export   # -> src/tokendp/models/default
  python scripts/train_default_model.py --smoke                           # tiny run in a temp dir
  python scripts/train_default_model.py --out runs/fill --init-from runs/base \
      --total-steps 6000 --max-doc 512 --lr 1.5e-4                        # fill stage from a model
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tokendp.errors import MissingDependencyError

try:
    from tokendp.models.training.trainer import TrainConfig, export, train
except MissingDependencyError as err:  # the train extra (Faker): one line and exit 2, before any work
    print(f"error: {err}", file=sys.stderr)
    sys.exit(2)

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "src" / "tokendp" / "models" / "default"


def smoke_config(out_dir: str) -> TrainConfig:
    """A tiny model on a little synthetic data (no WikiText needed): end to end in well under a minute."""
    return TrainConfig(out_dir=out_dir, wikitext="", vocab_size=400, hidden=32, layers=1, heads=2, ffn=64,
                       max_positions=256, total_steps=12, warmup=2, token_budget=512,
                       max_batch=4, min_doc=8, max_doc=48, max_paragraphs=200,
                       synthetic_for_tokenizer=200, log_every=4, threads=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/model", help="run directory")
    parser.add_argument("--export", action="store_true", help="export the latest checkpoint")
    parser.add_argument("--dest", default=str(PACKAGE_DIR), help="export destination")
    parser.add_argument("--smoke", action="store_true", help="tiny end-to-end run in a temp dir")
    parser.add_argument("--total-steps", type=int, default=None)
    parser.add_argument("--init-from", default=None,
                        help="continue from this exported model directory (fill stage)")
    parser.add_argument("--max-doc", type=int, default=None, help="longest source, in tokens")
    parser.add_argument("--lr", type=float, default=None, help="peak learning rate")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up steps")
    args = parser.parse_args(argv)
    if args.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            train(smoke_config(tmp))
            export(tmp, Path(tmp) / "export")
            print(f"smoke run exported {sorted(p.name for p in (Path(tmp) / 'export').iterdir())}")
        return 0
    if args.export:
        print(f"exported to {export(args.out, args.dest)}")
        return 0
    cfg = TrainConfig(out_dir=args.out)
    for name in ("total_steps", "init_from", "max_doc", "lr", "warmup"):
        if getattr(args, name) is not None:
            setattr(cfg, name, getattr(args, name))
    train(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
