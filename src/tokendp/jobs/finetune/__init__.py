"""DP fine-tuning: no DP, DP-SGD and ATDP on Opacus, with canaries (``tokendp finetune``).

``finetune(data, out=..., model=..., config=FinetuneConfig(...))`` trains and writes a loadable
model directory and its report; :mod:`~tokendp.jobs.finetune.data` turns records into token ids and
ATDP's loss weights; :mod:`~tokendp.jobs.finetune.train` is the loop. The guarantee and its proof:
docs/privacy.md, "DP-SGD and ATDP"; usage: docs/finetune.md.
"""

from tokendp.jobs.finetune.run import METHODS, FinetuneConfig, finetune

__all__ = ["METHODS", "FinetuneConfig", "finetune"]
