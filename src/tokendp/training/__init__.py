"""One resumable training loop for every trainer in tokendp (the rewriter's adapter, PMixED's
ensemble, ``tokendp finetune``): the run's fingerprint (a content hash of its data and
settings), one checkpoint format, the loop that checkpoints and resumes, and one progress
display. What a step computes (plain AdamW, or DP-SGD's clipping and noise) stays with the
caller."""

from tokendp.training.checkpoint import CHECKPOINT_FORMAT, load_checkpoint, save_checkpoint
from tokendp.training.fingerprint import check_run, fingerprint
from tokendp.training.loop import Progress, ResumableLoop
from tokendp.training.progress import ProgressBar

__all__ = ["CHECKPOINT_FORMAT", "Progress", "ProgressBar", "ResumableLoop", "check_run", "fingerprint",
           "load_checkpoint", "save_checkpoint"]
