"""Paired bootstrap comparison of two systems: ``python -m src.compare --gold G --pred-a A --pred-b B``.

Prints one JSON object with ``f1_a``, ``f1_b``, ``delta`` (A - B) and ``verdict``: the calibrated
verdict (better / worse / equivalent / inconclusive) from whole documents, its two-sided
permutation p-value, jackknife t interval, TOST p-value, MDD and the documents it rests on
(:mod:`src.scoring.calibrated`, alpha / margin / power from params.yaml's ``analysis``). Beside it,
named as the study's reading, ``delta_ci95``, ``p_value`` (one-sided, "A better than B") and
``p_value_two_sided`` of the study's instance-level paired bootstrap (``src.scoring.stats``). Both prediction files must cover exactly the gold
ids; bad input (files or options) exits with status 2 and one line on stderr naming
file and line; ``--resamples`` is 1 to 1,000,000.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from src.cli import OneLineArgumentParser, add_bootstrap_options, print_json_report
from src.core.errors import DataError
from src.core.settings import load_params
from src.scoring.calibrated import compare_documents
from src.scoring.clustered import resampling_units
from src.scoring.metrics import score_pairs
from src.scoring.predictions import pair_predictions, read_gold, read_predictions
from src.scoring.stats import paired_bootstrap
from src.study import METRICS


def compare_files(
    gold: str,
    pred_a: str,
    pred_b: str,
    resamples: int = 10_000,
    seed: int = 0,
    metric: str = "lcs",
    lowercase: bool = False,
) -> dict[str, Any]:
    """The JSON report of ``python -m src.compare`` as a dict."""
    records = read_gold(gold)
    if not records:
        raise DataError(gold, "no records")
    result_a = score_pairs(pair_predictions(records, read_predictions(pred_a), gold, pred_a), lowercase)
    result_b = score_pairs(pair_predictions(records, read_predictions(pred_b), gold, pred_b), lowercase)
    test = paired_bootstrap(result_a.stats[metric], result_b.stats[metric], resamples=resamples, seed=seed)
    report = test.to_dict()
    report.update({"n": len(result_a), "metric": metric, "seed": seed, "lowercase": lowercase})
    report["study_reading"] = "delta_ci95, p_value and p_value_two_sided: the study's instance-level paired bootstrap"
    ids = list(result_a.ids)
    units = resampling_units(np.stack([result_a.stats[metric], result_b.stats[metric]]), ids)
    analysis = load_params().analysis
    alpha, margin, power = analysis.alpha, analysis.margin, analysis.power
    verdict = compare_documents(units[0], units[1], alpha, margin, power, resamples, seed)
    report["verdict"] = {**verdict.to_dict(), "unit": "document", "alpha": alpha, "margin": margin, "power": power}
    return report


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(prog="python -m src.compare", description=__doc__.splitlines()[0])
    parser.add_argument("--gold", required=True, help="gold dataset JSONL")
    parser.add_argument("--pred-a", required=True, help="prediction JSONL of system A")
    parser.add_argument("--pred-b", required=True, help="prediction JSONL of system B")
    add_bootstrap_options(parser, "--resamples", minimum=1, default=10_000, help="bootstrap resamples")
    parser.add_argument("--metric", choices=METRICS, default="lcs", help="F1 to compare (default: lcs)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return print_json_report(
        lambda: compare_files(
            args.gold, args.pred_a, args.pred_b, args.resamples, args.seed, args.metric, args.lowercase
        )
    )


if __name__ == "__main__":
    sys.exit(main())
