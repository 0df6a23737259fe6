"""Time of the whole statistical analysis at paper scale, against testing one pair at a time.

Synthetic study of the paper's size: 42 configurations (6 models x 7 strategies, three
families with a dense and a MoE model each) x 13 task-dataset pairs x 400 instances,
10,000 bootstrap resamples. ``src.report.analysis.run_analysis`` draws one resample matrix
per dataset and instance set (here every configuration shares all instances: one per
dataset), gets every configuration's F1 for every resample from one matrix product, tests
all 11,193 pairs at once, applies the correction and answers RQ1-RQ3. The reference runs
``src.scoring.stats.paired_bootstrap`` (its own resamples) for a sample of pairs and extrapolates
to all of them. Target: the whole analysis in at most 10 s on 2 cores. Loading runs from
MLflow and drawing figures are not part of this number.

Run: ``python benchmarks/bench_analysis.py`` (writes ``benchmarks/results/analysis.json``);
``--quick`` runs a small shape in seconds and prints without recording.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from src.core.settings import load_params  # noqa: E402
from src.report.analysis import run_analysis  # noqa: E402
from src.report.comparisons import dataset_seed  # noqa: E402
from src.report.results import build_results as build_study  # noqa: E402
from src.scoring.stats import paired_bootstrap, resample_counts  # noqa: E402

_ANALYSIS = load_params().analysis
#: The study's margin, power and flip threshold (params.yaml): run_analysis has no defaults of its own.
STUDY = {"margin": _ANALYSIS.margin, "power": _ANALYSIS.power, "flip_threshold": _ANALYSIS.flip_threshold}

RESULTS = Path(__file__).resolve().parent / "results" / "analysis.json"
STRATEGIES = ("I", "D", "A", "D+I", "A+I", "A+D", "A+D+I")
MODELS = {  # name: (family, architecture, total B)
    "dense_a": ("a", "dense", 8.0),
    "moe_a": ("a", "moe", 400.0),
    "dense_b": ("b", "dense", 7.0),
    "moe_b": ("b", "moe", 235.0),
    "dense_c": ("c", "dense", 8.0),
    "moe_c": ("c", "moe", 46.7),
}
DATASETS = [(t, d) for t in ("timex", "eventx") for d in ("base", "adv", "adv_p", "t2c", "voc", "len")] + [
    ("comp", "base")
]


def synthetic_stats(rng: np.random.Generator, n_instances: int, hit_rate: float) -> np.ndarray:
    """Per-instance (matched, n_pred, n_gold): 0-4 predictions, 1-4 gold spans, quality around ``hit_rate``."""
    n_pred = rng.integers(0, 5, size=n_instances)
    n_gold = rng.integers(1, 5, size=n_instances)
    matched = np.minimum(n_pred, n_gold) * rng.beta(10 * hit_rate, 10 * (1 - hit_rate), size=n_instances)
    return np.column_stack([matched, n_pred, n_gold]).astype(np.float64)


def synthetic_study(seed: int, n_instances: int):
    """A Study with the paper's shape, built from synthetic per-instance statistics."""
    rng = np.random.default_rng(seed)
    runs, metrics, artifacts = [], {}, {}
    for model, (family, architecture, size) in MODELS.items():
        for strategy in STRATEGIES:
            config = f"{model}-{strategy}"
            runs.append(
                {
                    "config": config,
                    "run_id": config,
                    "start_time": 0,
                    "model": model,
                    "strategy": strategy,
                    "kind": "prompted",
                    "family": family,
                    "architecture": architecture,
                    "params_total_b": size,
                    "params_active_b": size,
                    "inductive_plus": "I" in strategy,
                    "size_series": None,
                }
            )
            metrics[config], artifacts[config] = {}, {}
            rate = rng.uniform(0.3, 0.8)
            for task, dataset in DATASETS:
                stats = synthetic_stats(rng, n_instances, rate)
                totals = stats.sum(axis=0)
                metrics[config][f"{task}.{dataset}.f1"] = 2 * totals[0] / (totals[1] + totals[2])
                for error in ("missing", "spurious", "boundary"):
                    metrics[config][f"{task}.{dataset}.errors.{error}"] = float(rng.integers(0, 200))
                artifacts[config][task, dataset] = {
                    "ids": [f"i{k}" for k in range(n_instances)],
                    "stats": {"lcs": stats},
                }
    return build_study(runs, metrics, artifacts, "synthetic", "benchmark", "0")


def timed(function) -> tuple[float, float, object]:
    start, start_cpu = time.perf_counter(), time.process_time()
    result = function()
    return time.perf_counter() - start, time.process_time() - start_cpu, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--instances", type=int, default=400)
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--sample-pairs", type=int, default=20)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a small shape (50 instances, 200 resamples, 3 sampled pairs); prints, records nothing",
    )
    args = parser.parse_args()
    if args.quick:
        args.instances, args.resamples, args.sample_pairs = 50, 200, 3
    load_before = os.getloadavg()[0]
    study = synthetic_study(args.seed, args.instances)
    runs = [timed(lambda: run_analysis(study, args.resamples, args.seed, 0.05, "holm", **STUDY)) for _ in range(2)]
    wall, cpu, analysis = min(runs, key=lambda r: r[0])
    default_wall, default_cpu, _ = timed(lambda: run_analysis(study, 1000, args.seed, 0.05, "holm", **STUDY))

    pair_rng = random.Random(args.seed)
    keys = list(analysis.tests)
    ids = sorted(study.datasets[keys[0]].ids[study.runs.index[0]])  # every configuration has every instance
    stacked = {key: study.datasets[key].stacked(list(study.runs.index), ids) for key in keys}
    sample = [(pair_rng.choice(keys), *pair_rng.sample(range(len(study.runs)), 2)) for _ in range(args.sample_pairs)]
    start = time.perf_counter()
    for key, i, j in sample:
        stats = stacked[key]
        paired_bootstrap(stats[i], stats[j], resamples=args.resamples, seed=args.seed)
    per_pair = (time.perf_counter() - start) / len(sample)
    # Same resamples, same answer: the shared matrix is only a faster way to the same tests.
    max_difference = 0.0
    for key, i, j in sample[:5]:
        stats = stacked[key]
        counts = resample_counts(stats.shape[1], args.resamples, dataset_seed(args.seed, key, ids))
        single = paired_bootstrap(stats[i], stats[j], counts=counts)
        max_difference = max(max_difference, abs(single.p_value - analysis.tests[key].p_value[i, j]))
    pairs = sum(t.pairs for t in analysis.tests.values())
    result = {
        "machine": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "cpus": os.cpu_count(),
            "load_average_1min_before_after": [load_before, os.getloadavg()[0]],
        },
        "configurations": len(study.runs),
        "datasets": len(analysis.tests),
        "instances": args.instances,
        "resamples": args.resamples,
        "pairs": pairs,
        "whole_analysis_s": wall,
        "whole_analysis_cpu_s": cpu,
        "pairwise_tests_s": analysis.timings["pairwise_tests_s"],
        "whole_analysis_1000_resamples_s": default_wall,
        "whole_analysis_1000_resamples_cpu_s": default_cpu,
        "one_pair_at_a_time_s_per_pair": per_pair,
        "sampled_pairs": len(sample),
        "one_pair_at_a_time_extrapolated_s": per_pair * pairs,
        "speedup": per_pair * pairs / wall,
        "target_s": 10.0,
        "meets_target": wall <= 10.0,
        "max_p_value_difference_same_resamples": max_difference,
    }
    if not args.quick:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
