"""Benchmark: how the part-of-speech source changes ATDP's detector tiers (issue 29, item 10).

No gold part-of-speech data is available here, so the tiers are measured against TAB's gold
entity spans on the reporting half (the 127 doc ids sorted as strings, odd positions; see
../shared/data/README.md). For each tier and each POS source:

- ``recall``: the share of gold-span characters the tier marks sensitive;
- ``marked``: the share of word characters (the detector's word tokens) the tier marks.

The entity tiers do not read POS tags and are the same for every source. Every source after
the first is compared with the first: agreement on the universal tag of each word (overall, and
per tag for NOUN/PROPN/VERB/PRON/NUM as both/either: words both sources give the tag over words
at least one does), how much the contextual tiers' marked characters differ (characters marked
by one source only, as a share of word characters, and the Jaccard index of the two marked
sets), and the tagging speed in words per second (all timed in this run, so the ratio compares
across machines). Entities come from the ``auto`` tagger, once per document.

Sources, each measured when installed: ``denckring-en-pos`` (the detector's source until issue
29, built here from the package), ``textblob`` (:func:`tokendp.text.sensitivity.pattern_pos`,
the default now) and, with ``--context-rules``, ``textblob+context``: the same followed by the
Brill contextual rules that ship in textblob's wheel, which the default leaves out.

    PYTHONPATH=src python benchmarks/pos_tiers.py [--data ../shared/data/tab] [--context-rules] [--json OUT]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tokendp.text.sensitivity import TIERS, Word, sentence_words, tier_spans

Pos = Callable[[Sequence[str]], list[str]]
FOCUS = ("NOUN", "PROPN", "VERB", "PRON", "NUM")


def denckring_pos() -> Pos:
    """The averaged perceptron of ``denckring-en-pos`` (labels ``UPOS|VerbForm``; form dropped)."""
    import denckring_en_pos

    tagger = denckring_en_pos.tagger()
    return lambda words: [label.partition("|")[0] for label in tagger.tag(list(words))]


def with_context_rules(pos: Pos) -> Pos:
    """``pos`` (textblob's) with the Brill contextual rules of textblob's wheel applied to its
    Penn Treebank tags before they are mapped to universal ones."""
    from textblob.en import lexicon, parser

    from tokendp.text.sensitivity import universal_tags

    def tag(words: Sequence[str]) -> list[str]:
        tagged = parser.find_tags(["'s" if w == "s" else w for w in words])
        tagged = lexicon.context.apply([[w, "CD" if w.isdigit() else t] for w, (_, t) in zip(words, tagged)])
        return universal_tags(words, [t for _, t in tagged])

    return tag


def sources(context_rules: bool = False) -> dict[str, Pos]:
    """The POS sources installed here, by name (the first is the reference of the comparisons)."""
    found: dict[str, Pos] = {}
    if importlib.util.find_spec("denckring_en_pos"):
        found["denckring-en-pos"] = denckring_pos()
    if importlib.util.find_spec("textblob"):
        from tokendp.text import sensitivity

        if hasattr(sensitivity, "pattern_pos"):
            found["textblob"] = sensitivity.pattern_pos()
            if context_rules:
                found["textblob+context"] = with_context_rules(found["textblob"])
    return found


def reporting_half(data: Path) -> dict[str, str]:
    texts = json.loads((data / "texts.json").read_text(encoding="utf-8"))
    return {doc: texts[doc] for doc in sorted(texts)[1::2]}


def tag_words(text: str, pos: Pos) -> tuple[list[Word], float]:
    """The words of ``text`` tagged one sentence at a time, and the seconds spent in ``pos``."""
    found = sentence_words(text)
    words: list[Word] = []
    spent = 0.0
    for sentence in sorted({s for _, _, s in found}):
        part = [(a, b) for a, b, s in found if s == sentence]
        start = time.perf_counter()
        tags = pos([text[a:b] for a, b in part])
        spent += time.perf_counter() - start
        words.extend(Word(a, b, tag, sentence) for (a, b), tag in zip(part, tags))
    return words, spent


def chars(spans) -> set[int]:
    return {i for s in spans for i in range(s.start, s.end)}


def measure(data: Path, context_rules: bool = False) -> dict:
    from tokendp.text.taggers import get_tagger

    docs = reporting_half(data)
    gold = json.loads((data / "gold_spans.json").read_text(encoding="utf-8"))
    entity_tagger = get_tagger("auto")
    found = sources(context_rules)
    if not found:
        raise SystemExit("no POS source installed: pip install textblob (or denckring-en-pos)")
    word_chars = gold_chars = 0
    hits = {(name, tier): 0 for name in found for tier in TIERS}
    marked = dict.fromkeys(hits, 0)
    seconds = dict.fromkeys(found, 0.0)
    count = 0
    tags: dict[str, list[str]] = {name: [] for name in found}
    marked_sets: dict[tuple[str, str], list[set[int]]] = {}
    for doc, text in docs.items():
        entities = entity_tagger.tag(text)
        gold_set = {i for a, b, _ in gold[doc] for i in range(a, b)}
        word_set = {i for a, b, _ in sentence_words(text) for i in range(a, b)}
        gold_chars += len(gold_set)
        word_chars += len(word_set)
        for name, pos in found.items():
            words, spent = tag_words(text, pos)
            seconds[name] += spent
            tags[name].extend(w.upos for w in words)
            for tier in TIERS:
                got = chars(tier_spans(text, entities, words, tier=tier))
                hits[name, tier] += len(got & gold_set)
                marked[name, tier] += len(got & word_set)
                if tier.endswith("contextual"):
                    marked_sets.setdefault((name, tier), []).append({i + count for i in got & word_set})
        count += len(text) + 1  # offsets of the next document, so the sets of all documents join
    report = {
        "documents": len(docs), "words": len(next(iter(tags.values()))), "word_chars": word_chars,
        "gold_chars": gold_chars,
        "tiers": {name: {tier: {"recall": hits[name, tier] / gold_chars, "marked": marked[name, tier] / word_chars}
                         for tier in TIERS} for name in found},
        "words_per_second": {name: len(tags[name]) / seconds[name] for name in found},
    }
    first, *others = found
    report["comparisons"] = {f"{other} vs {first}": compare(first, other, tags, marked_sets, word_chars,
                                                            report["words_per_second"]) for other in others}
    return report


def compare(first: str, second: str, tags: dict[str, list[str]], marked_sets: dict, word_chars: int,
            speed: dict[str, float]) -> dict:
    """Agreement of two sources' tags, and how far apart their contextual tiers' marks lie."""
    a, b = tags[first], tags[second]
    per_tag = {}
    for tag in FOCUS:
        either = sum(x == tag or y == tag for x, y in zip(a, b))
        both = sum(x == tag and y == tag for x, y in zip(a, b))
        per_tag[tag] = {first: a.count(tag), second: b.count(tag), "both/either": both / either if either else 1.0}
    tiers = {}
    for tier in ("low-contextual", "high-contextual"):
        one = set().union(*marked_sets[first, tier])
        two = set().union(*marked_sets[second, tier])
        tiers[tier] = {f"only {first}": len(one - two) / word_chars, f"only {second}": len(two - one) / word_chars,
                       "jaccard": len(one & two) / len(one | two)}
    return {"agreement": sum(x == y for x, y in zip(a, b)) / len(a), "per_tag": per_tag, "tiers": tiers,
            "speed_ratio": {f"{second}/{first}": speed[second] / speed[first]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/tab", help="TAB folder (texts.json, gold_spans.json)")
    parser.add_argument("--context-rules", action="store_true",
                        help="also measure textblob with the Brill contextual rules of its wheel")
    parser.add_argument("--json", help="also write the report here")
    args = parser.parse_args()
    report = measure(Path(args.data), args.context_rules)
    print(f"TAB reporting half: {report['documents']} documents, {report['words']:,} words, "
          f"{report['gold_chars']:,} gold characters, {report['word_chars']:,} word characters")
    print(f"{'source':<18}{'tier':<17}{'recall':>8}{'marked':>8}")
    for name, tiers in report["tiers"].items():
        for tier, row in tiers.items():
            print(f"{name:<18}{tier:<17}{row['recall']:8.3f}{row['marked']:8.3f}")
    for name, speed in report["words_per_second"].items():
        print(f"{name}: {speed:,.0f} words per second")
    for pair, comparison in report["comparisons"].items():
        print(f"{pair}: {json.dumps(comparison, indent=1)}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
