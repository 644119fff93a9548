"""Train the shipped CRF tagger on the TAB tuning half, choosing its threshold by cross-validation.

Uses ONLY the tuning half (even-indexed documents of the sorted doc_ids); the reporting half is
never read. To these it adds ``--synthetic`` short English notes naming people in many scripts
(``tokendp.text.taggers.synthetic``), and writes the name gazetteer ``names.tsv`` beside the
model; both use only the "train" part of Faker's per-locale name lists
(``tokendp.text.taggers.name_lists``; needs the ``train`` extra), never the "heldout" part that
``benchmarks/multilingual_tagger.py`` evaluates on. The decision threshold on P(token is an
entity) is the one with the highest cross-validated character recall (of the ``auto`` tagger:
patterns + CRF; every fold trains with the notes, and is scored on TAB documents only) among
those whose cross-validated precision is at least ``--min-precision``. The final model is then
fitted on the whole tuning half and the notes. Deterministic: the same data, options and Faker
version give the same model file.

    PYTHONPATH=src python scripts/train_tagger.py --data ../shared/data/tab
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import tempfile
from pathlib import Path

from tokendp.text.tab import load_tab
from tokendp.eval.tagging import char_scores
from tokendp.text.taggers.combined import AutoTagger
from tokendp.text.taggers.gazetteer import NAMES_FILE, write_names
from tokendp.text.taggers.model import META_FILE, MODEL_FILE, TrainingSettings, default_model_dir, train_crf
from tokendp.text.taggers.name_lists import words
from tokendp.text.taggers.synthetic import notes

THRESHOLDS = (0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5)


def cross_validate(texts: dict, gold: dict, extra: tuple[list, list], names: Path, folds: int,
                   settings: TrainingSettings) -> dict:
    """Pooled out-of-fold predictions per threshold -> {threshold: (recall, precision)}; every fold
    trains on the other folds' documents plus the ``extra`` (texts, spans) and the gazetteer ``names``."""
    ids = sorted(texts)
    predictions: dict[float, dict] = {t: {} for t in THRESHOLDS}
    for k in range(folds):
        held = ids[k::folds]
        train = [d for d in ids if d not in held]
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copy(names, Path(tmp) / NAMES_FILE)
            train_crf([texts[d] for d in train] + extra[0], [gold[d] for d in train] + extra[1],
                      Path(tmp) / MODEL_FILE, settings)
            for t in THRESHOLDS:
                tagger = AutoTagger(tmp, threshold=t)
                predictions[t].update({d: tagger.tag(texts[d]) for d in held})
        print(f"fold {k + 1}/{folds} done", flush=True)
    return {t: char_scores(texts, gold, predictions[t]) for t in THRESHOLDS}


def choose_threshold(scores: dict, min_precision: float) -> float:
    feasible = [t for t, s in scores.items() if s.precision >= min_precision]
    if not feasible:
        return max(scores, key=lambda t: scores[t].precision)
    return max(feasible, key=lambda t: (scores[t].recall, t))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="TAB data folder (texts.json, gold_spans.json)")
    parser.add_argument("--out", default=str(default_model_dir()), help="folder for the model files")
    parser.add_argument("--folds", type=int, default=4)
    parser.add_argument("--synthetic", type=int, default=800, help="synthetic multilingual notes added")
    parser.add_argument("--min-precision", type=float, default=0.80)
    parser.add_argument("--c1", type=float, default=TrainingSettings.c1)
    parser.add_argument("--c2", type=float, default=TrainingSettings.c2)
    parser.add_argument("--iterations", type=int, default=TrainingSettings.max_iterations)
    parser.add_argument("--threshold", type=float,
                        help="skip cross-validation and use this threshold (e.g. one a previous CV run chose)")
    args = parser.parse_args()

    tune = load_tab(args.data, "tune")
    settings = TrainingSettings(c1=args.c1, c2=args.c2, max_iterations=args.iterations)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_names(out / NAMES_FILE, words("train"))
    extra = notes(args.synthetic, seed=0)
    scores = {} if args.threshold else cross_validate(tune.texts, tune.gold, extra, out / NAMES_FILE,
                                                       args.folds, settings)
    for t, s in scores.items():
        print(f"threshold {t:.2f}: CV recall {s.recall:.3f} precision {s.precision:.3f}")
    threshold = args.threshold or choose_threshold(scores, args.min_precision)
    print(f"threshold {threshold}", flush=True)

    ids = sorted(tune.texts)
    train_crf([tune.texts[d] for d in ids] + extra[0], [tune.gold[d] for d in ids] + extra[1],
              out / MODEL_FILE, settings)
    meta = {
        "threshold": threshold,
        "trained_on": "TAB ECHR test split, tuning half (even-indexed sorted doc_ids), and synthetic "
                      "notes naming people in many scripts (train part of Faker's name lists)",
        "documents": len(ids),
        "synthetic_notes": args.synthetic,
        "doc_ids_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest(),
        "settings": vars(settings),
        "folds": None if args.threshold else args.folds,
        "min_precision": args.min_precision,
        "cv": {str(t): {"recall": round(s.recall, 4), "precision": round(s.precision, 4)}
               for t, s in scores.items()},
    }
    (out / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out / MODEL_FILE}, {out / NAMES_FILE} and {out / META_FILE}")


if __name__ == "__main__":
    main()
