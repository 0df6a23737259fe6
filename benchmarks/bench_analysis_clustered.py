"""Time of the whole analysis with documents resampled, verdicts, power and robustness, at paper scale.

Synthetic study of the paper profile's size: 65 configurations (63 prompted: 9 models x 7
strategies, and 2 fine-tuned) x 13 task-dataset pairs at full test-set size: 400 sentences
from 78 documents on the sentence sets (base and the derived adv, adv_p, voc keep the base
ids), 311 sentences from 69 documents on t2c, 78 whole documents on len; 10,000 resamples.
``run_analysis`` resamples whole documents (one draw per dataset and instance set shared by every
configuration), runs every paired test and its TOST, corrects both, states the minimum
detectable differences, every configuration's interval under both resampling units and the
robustness table (flip rate, drop rate, worst case, each with its interval). The reference is an
independent brute-force cluster bootstrap, one pair at a time (a sample of pairs, extrapolated).
Target: the whole analysis within 10 s on 2 cores. Loading and drawing are not part of it.

Run: ``python benchmarks/bench_analysis_clustered.py`` (writes
``benchmarks/results/analysis_clustered.json``); ``--quick`` runs a small shape and records nothing.
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

from benchmarks.bench_analysis import STRATEGIES, synthetic_stats, timed  # noqa: E402
from src.core.settings import load_params  # noqa: E402
from src.report.analysis import run_analysis  # noqa: E402
from src.report.results import build_results as build_study  # noqa: E402

_ANALYSIS = load_params().analysis
#: The study's margin, power and flip threshold (params.yaml): run_analysis has no defaults of its own.
STUDY = {"margin": _ANALYSIS.margin, "power": _ANALYSIS.power, "flip_threshold": _ANALYSIS.flip_threshold}

RESULTS = Path(__file__).resolve().parent / "results" / "analysis_clustered.json"
FAMILIES = ("a", "b", "c")
SIZES = {"dense": (7.0, 8.0, 24.0), "moe": (46.7, 235.0, 400.0)}  # 9 models: three families x three
DATASETS = [(t, d) for t in ("timex", "eventx") for d in ("base", "adv", "adv_p", "t2c", "voc", "len")] + [
    ("comp", "base")
]


def dataset_ids(dataset: str, scale: float) -> list[str]:
    """Instance ids of a set at ``scale`` of the full size: sentences of documents, or whole documents."""
    rng = np.random.default_rng(len(dataset))
    documents, sentences = (69, 311) if dataset == "t2c" else (78, 400)
    documents, sentences = max(2, round(documents * scale)), max(4, round(sentences * scale))
    if dataset == "len":
        return [f"doc{d}.tml" for d in range(documents)]
    owner = np.sort(np.concatenate([np.arange(documents), rng.integers(0, documents, sentences - documents)]))
    counts: dict[int, int] = {}
    ids = []
    for d in owner:
        ids.append(f"{dataset if dataset == 't2c' else 'tb'}{d}.tml#s{counts.setdefault(int(d), 0)}")
        counts[int(d)] += 1
    return ids


def synthetic_study(seed: int, scale: float):
    rng = np.random.default_rng(seed)
    models = [
        (f"{arch}_{f}{n}", f, arch, size) for f in FAMILIES for arch in SIZES for n, size in enumerate(SIZES[arch])
    ]
    models = models[:9]
    configs = [(f"{m}-{s}", m, s, f, a, size, "prompted") for m, f, a, size in models for s in STRATEGIES]
    configs += [(f"tagger{n}", f"tagger{n}", "finetuned", "bert", "dense", 0.1, "finetuned") for n in range(2)]
    ids = {d: dataset_ids(d, scale) for _, d in DATASETS}
    runs, metrics, artifacts = [], {}, {}
    for config, model, strategy, family, arch, size, kind in configs:
        runs.append(
            {
                "config": config,
                "run_id": config,
                "start_time": 0,
                "model": model,
                "strategy": strategy,
                "kind": kind,
                "family": family,
                "architecture": arch,
                "params_total_b": size,
                "params_active_b": size,
                "inductive_plus": "I" in strategy,
                "size_series": None,
            }
        )
        metrics[config], artifacts[config] = {}, {}
        rate = rng.uniform(0.3, 0.8)
        for task, dataset in DATASETS:
            stats = synthetic_stats(rng, len(ids[dataset]), rate)
            totals = stats.sum(axis=0)
            metrics[config][f"{task}.{dataset}.f1"] = 2 * totals[0] / (totals[1] + totals[2])
            artifacts[config][task, dataset] = {"ids": ids[dataset], "stats": {"lcs": stats}}
    return build_study(runs, metrics, artifacts, "synthetic", "benchmark", "0")


def brute_force_pair(stats_a, stats_b, ids, resamples, rng) -> float:
    """One pair's clustered p-value the plain way: draw documents, collect their sentences, sum, compare."""
    members: dict[str, list[int]] = {}
    for n, instance in enumerate(ids):
        members.setdefault(instance.split("#s")[0], []).append(n)
    groups = list(members.values())
    below = 0.0
    for _ in range(resamples):
        rows = [n for d in rng.integers(0, len(groups), len(groups)) for n in groups[d]]
        a, b = stats_a[rows].sum(axis=0), stats_b[rows].sum(axis=0)
        delta = 2 * a[0] / (a[1] + a[2]) - 2 * b[0] / (b[1] + b[2])
        below += 1.0 if delta < 0 else 0.5 if delta == 0 else 0.0
    return below / resamples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--sample-pairs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--quick", action="store_true", help="a tenth of the sizes, 200 resamples; records nothing")
    args = parser.parse_args()
    scale = 0.1 if args.quick else 1.0
    if args.quick:
        args.resamples, args.sample_pairs = 200, 1
    load_before = os.getloadavg()[0]
    study = synthetic_study(args.seed, scale)
    runs = [timed(lambda: run_analysis(study, args.resamples, args.seed, 0.05, "holm", **STUDY)) for _ in range(2)]
    wall, cpu, analysis = min(runs, key=lambda r: r[0])
    instance_wall, _, _ = timed(
        lambda: run_analysis(study, args.resamples, args.seed, 0.05, "holm", unit="instance", **STUDY)
    )

    pair_rng, rng = random.Random(args.seed), np.random.default_rng(args.seed)
    keys = list(analysis.tests)
    sample = [(pair_rng.choice(keys), *pair_rng.sample(range(63), 2)) for _ in range(args.sample_pairs)]
    start = time.perf_counter()
    for key, i, j in sample:
        data = study.datasets[key]
        a, b = data.configs[i], data.configs[j]
        brute_force_pair(data.stats[a], data.stats[b], data.ids[a], args.resamples, rng)
    per_pair = (time.perf_counter() - start) / len(sample)
    pairs = analysis.prompted.pairs + analysis.finetuned.pairs
    ratios = analysis.widths.attrs["ratios"]
    result = {
        "machine": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "cpus": os.cpu_count(),
            "load_average_1min_before_after": [load_before, os.getloadavg()[0]],
        },
        "configurations": len(study.runs),
        "datasets": len(analysis.tests),
        "resamples": args.resamples,
        "pairs": pairs,
        "robustness_rows": len(analysis.robustness),
        "whole_analysis_s": wall,
        "whole_analysis_cpu_s": cpu,
        "pairwise_tests_s": analysis.timings["pairwise_tests_s"],
        "whole_analysis_instance_level_s": instance_wall,
        "brute_force_cluster_bootstrap_s_per_pair": per_pair,
        "sampled_pairs": len(sample),
        "brute_force_extrapolated_s": per_pair * pairs,
        "speedup": per_pair * pairs / wall,
        "median_width_ratio_document_over_instance": float(ratios["ratio"].median()),
        "target_s": 10.0,
        "meets_target": wall <= 10.0,
    }
    if not args.quick:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
