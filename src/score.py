"""Score a prediction file against a gold dataset: ``python -m src.score --gold G --pred P``.

Prints one JSON object: ``n``; ``lcs``, ``strict`` and ``relaxed`` blocks with
``precision``, ``recall`` and ``f1`` (plus ``ci95`` on each F1 with ``--bootstrap N``);
``errors`` (exact, boundary, missing, spurious); ``n_pred``, ``n_gold``,
``predictions_not_in_text``; and ``per_label`` blocks (TIMEX, EVENT) when the gold
has both labels. ``--variant released`` (or another name of
``src.scoring.variants.VARIANTS``, or ``all``) prints the study's released scorer instead
of, or beside, the paper's formula: ``precision``, ``recall``, ``f1`` (and ``ci95``) per
variant. Bad input (files or options) exits with status 2 and one line on stderr
naming file and line; ``--bootstrap`` is at most 1,000,000 and must fit in memory (the
resample count matrix takes 8 bytes per resample and instance, held twice while built).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from src.cli import OneLineArgumentParser, add_bootstrap_options, check_resample_memory, print_json_report
from src.scoring.metrics import ScoreResult, score_pairs
from src.scoring.predictions import load_pairs
from src.scoring.stats import bootstrap_f1, percentile_interval, resample_counts
from src.scoring.variants import VARIANTS, score_all_variants
from src.study import METRICS, PRIMARY_SCORER as PRIMARY

BYTES_PER_COUNT = 16  # float64 counts, held twice while the blocks are concatenated


def add_confidence_intervals(block: dict[str, Any], result: ScoreResult, counts, confidence: float = 0.95) -> None:
    """Add a percentile ``ci95`` to each metric's block, all metrics on the same resamples."""
    for metric in METRICS:
        low, high = percentile_interval(bootstrap_f1(result.stats[metric], counts), confidence)
        block[metric][f"ci{round(confidence * 100)}"] = [float(low), float(high)]


def variant_report(pairs, variants: Sequence[str], lowercase: bool, counts) -> dict[str, Any]:
    """Precision, recall and F1 (and ``ci95`` on the same resamples) for each named variant."""
    scores = score_all_variants(pairs, list(variants), lowercase=lowercase)
    blocks = {}
    for name, scored in scores.items():
        precision, recall, f1 = scored.prf()
        block = {
            "precision": float(precision),
            "recall": float(recall),
            "f1": float(f1),
            "description": VARIANTS[name].description,
        }
        if counts is not None:
            low, high = percentile_interval(bootstrap_f1(scored.stats, counts))
            block["ci95"] = [float(low), float(high)]
        blocks[name] = block
    return blocks


def score_files(
    gold: str, pred: str, bootstrap: int = 0, seed: int = 0, lowercase: bool = False, variant: str = PRIMARY
) -> dict[str, Any]:
    """The JSON report of ``python -m src.score`` as a dict."""
    pairs = load_pairs(gold, pred)
    if variant != PRIMARY:
        names = list(VARIANTS) if variant == "all" else [variant]
        counts = None
        if bootstrap > 0:
            check_resample_memory(bootstrap, len(pairs), BYTES_PER_COUNT, "--bootstrap")
            counts = resample_counts(len(pairs), bootstrap, seed)
        report = {"n": len(pairs), "variants": variant_report(pairs, names, lowercase, counts)}
        if counts is not None:
            report["bootstrap"] = {"resamples": bootstrap, "seed": seed}
        return report
    result = score_pairs(pairs, lowercase=lowercase)
    report = result.to_dict()
    if bootstrap > 0:
        check_resample_memory(bootstrap, len(result), BYTES_PER_COUNT, "--bootstrap")
        counts = resample_counts(len(result), bootstrap, seed)
        add_confidence_intervals(report, result, counts)
        for label, label_result in result.per_label.items():
            add_confidence_intervals(report["per_label"][label], label_result, counts)
        report["bootstrap"] = {"resamples": bootstrap, "seed": seed}
    report["lowercase"] = lowercase
    return report


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(prog="python -m src.score", description=__doc__.splitlines()[0])
    parser.add_argument("--gold", required=True, help="gold dataset JSONL (data/prepared/{task}/{name}.jsonl)")
    parser.add_argument("--pred", required=True, help='prediction JSONL: {"id": str, "predictions": [...]}')
    add_bootstrap_options(parser, "--bootstrap", minimum=0, default=0, help="resamples for 95%% CIs (0: none)")
    parser.add_argument(
        "--variant",
        choices=[*VARIANTS, "all"],
        default=PRIMARY,
        help="scorer: paper (the paper's formula, default), the study's released scorer "
        "(released, released_best, released_char, released_char_best) or all side by side",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return print_json_report(
        lambda: score_files(args.gold, args.pred, args.bootstrap, args.seed, args.lowercase, args.variant)
    )


if __name__ == "__main__":
    sys.exit(main())
