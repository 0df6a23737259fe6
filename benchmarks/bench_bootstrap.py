"""Throughput of the scorer and the bootstrap, each against a simple reference measured in the same run.

Three measurements (synthetic data, seeded):

1. one paired bootstrap test, 10,000 resamples x 400 instances: ``src.scoring.stats.paired_bootstrap``
   (count matrix + one matrix product) against two pure-Python loops: a straightforward
   one (draw a sample of indices, sum each statistic over it, compare F1s) and a
   hand-tuned one (running sums in local variables, no intermediate lists).
   Target: >= 100x.
2. scoring throughput: ``src.scoring.metrics.score_pairs`` on 400 sentence-sized instances and on
   80 document-sized ones (many spans each); beside it every scorer variant
   (``src.scoring.variants.score_variant``) on the same pairs, as a ratio to ``score_pairs``.
   Target: the released token variants take no longer than the paper scorer (ratio <= 1).
3. the paper-scale analysis, 42 systems x 13 datasets x 400 instances x 10,000 resamples:
   one shared resample matrix per dataset and ``all_pairs_bootstrap``, against one
   ``paired_bootstrap`` per pair, timed on a sample of pairs and extrapolated to all of
   them. Target: <= 10 s.

Run: ``python benchmarks/bench_bootstrap.py`` (writes ``benchmarks/results/bootstrap.json``).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from src.data.schema import Record, Span  # noqa: E402
from src.scoring.metrics import score_pairs  # noqa: E402
from src.scoring.stats import all_pairs_bootstrap, paired_bootstrap  # noqa: E402
from src.scoring.variants import score_variant  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "bootstrap.json"
VARIANTS = ("paper", "released", "released_best", "released_char")
TOKEN_VARIANTS = ("released", "released_best")
VOCAB = "the a last next week month year day Monday Friday May June morning noon said met left rain three two".split()


def synthetic_stats(rng: np.random.Generator, n_instances: int, hit_rate: float) -> np.ndarray:
    """Per-instance (matched, n_pred, n_gold) resembling real output: 0-4 predictions, 1-4 gold spans."""
    n_pred = rng.integers(0, 5, size=n_instances)
    n_gold = rng.integers(1, 5, size=n_instances)
    matched = np.minimum(n_pred, n_gold) * rng.beta(10 * hit_rate, 10 * (1 - hit_rate), size=n_instances)
    return np.column_stack([matched, n_pred, n_gold]).astype(np.float64)


def best_of(function, repeats: int) -> float:
    """Fastest wall time of ``repeats`` calls (the least disturbed by other processes)."""
    return best_of_wall_cpu(function, repeats)[0]


def best_of_wall_cpu(function, repeats: int) -> tuple[float, float]:
    """Fastest wall time and fastest process CPU time of ``repeats`` calls.

    CPU time is reported beside wall time because the machine is shared: other
    processes stretch wall time, more so for short calls.
    """
    walls, cpus = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        function()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - start_cpu)
    return min(walls), min(cpus)


def micro_f1(rows: list) -> float:
    """Micro-F1 of a list of (matched, n_pred, n_gold) rows."""
    matched = sum(row[0] for row in rows)
    predicted = sum(row[1] for row in rows)
    gold = sum(row[2] for row in rows)
    return 2 * matched / (predicted + gold) if predicted + gold else 0.0


def paired_test_straightforward(stats_a: np.ndarray, stats_b: np.ndarray, resamples: int, seed: int) -> float:
    """Reference: the paired bootstrap as one would first write it in Python; returns p."""
    rng = random.Random(seed)
    rows_a, rows_b = stats_a.tolist(), stats_b.tolist()
    n = len(rows_a)
    not_better = 0.0
    for _ in range(resamples):
        sample = [rng.randrange(n) for _ in range(n)]
        delta = micro_f1([rows_a[i] for i in sample]) - micro_f1([rows_b[i] for i in sample])
        not_better += 1.0 if delta < 0 else 0.5 if delta == 0 else 0.0
    return not_better / resamples


def paired_test_loop(stats_a: np.ndarray, stats_b: np.ndarray, resamples: int, seed: int) -> dict:
    """Reference: the paired bootstrap as a hand-tuned plain Python loop."""
    rng = random.Random(seed)
    rows_a, rows_b = stats_a.tolist(), stats_b.tolist()
    n = len(rows_a)
    deltas = []
    for _ in range(resamples):
        ma = pa = ga = mb = pb = gb = 0.0
        for _ in range(n):
            i = rng.randrange(n)
            a, b = rows_a[i], rows_b[i]
            ma += a[0]
            pa += a[1]
            ga += a[2]  # noqa: E702
            mb += b[0]
            pb += b[1]
            gb += b[2]  # noqa: E702
        f1_a = 2 * ma / (pa + ga) if pa + ga else 0.0
        f1_b = 2 * mb / (pb + gb) if pb + gb else 0.0
        deltas.append(f1_a - f1_b)
    below = sum(1 for d in deltas if d < 0)
    ties = sum(1 for d in deltas if d == 0)
    deltas.sort()
    return {
        "p_value": (below + 0.5 * ties) / resamples,
        "delta_ci": [deltas[int(0.025 * resamples)], deltas[int(0.975 * resamples) - 1]],
    }


def bench_paired(seed: int, resamples: int = 10_000, n_instances: int = 400) -> dict:
    rng = np.random.default_rng(seed)
    stats_a, stats_b = synthetic_stats(rng, n_instances, 0.62), synthetic_stats(rng, n_instances, 0.58)
    vectorised, vectorised_cpu = best_of_wall_cpu(
        lambda: paired_bootstrap(stats_a, stats_b, resamples=resamples, seed=seed), 20
    )
    result = paired_bootstrap(stats_a, stats_b, resamples=resamples, seed=seed)
    reference = paired_test_loop(stats_a, stats_b, resamples, seed)
    loop, loop_cpu = best_of_wall_cpu(lambda: paired_test_loop(stats_a, stats_b, resamples, seed), 2)
    straightforward_p = paired_test_straightforward(stats_a, stats_b, resamples, seed)
    simple, simple_cpu = best_of_wall_cpu(lambda: paired_test_straightforward(stats_a, stats_b, resamples, seed), 1)
    return {
        "resamples": resamples,
        "instances": n_instances,
        "vectorised_s": vectorised,
        "vectorised_cpu_s": vectorised_cpu,
        "straightforward_loop_s": simple,
        "straightforward_loop_cpu_s": simple_cpu,
        "speedup_vs_straightforward": simple / vectorised,
        "speedup_vs_straightforward_cpu": simple_cpu / vectorised_cpu,
        "tuned_loop_s": loop,
        "tuned_loop_cpu_s": loop_cpu,
        "speedup_vs_tuned": loop / vectorised,
        "speedup_vs_tuned_cpu": loop_cpu / vectorised_cpu,
        "target_speedup": 100,
        "p_value_vectorised": result.p_value,
        "p_value_straightforward_loop": straightforward_p,
        "p_value_tuned_loop": reference["p_value"],
        "delta_ci_vectorised": list(result.delta_ci),
        "delta_ci_loop": reference["delta_ci"],
    }


def synthetic_records(rng: random.Random, count: int, n_words: int, n_spans: int) -> list:
    """(record, predictions) pairs: gold spans are word windows; predictions shift, drop, repeat, invent."""
    pairs = []
    for index in range(count):
        tokens = [rng.choice(VOCAB) for _ in range(n_words)]
        text = " ".join(tokens)
        starts = [0]
        for token in tokens[:-1]:
            starts.append(starts[-1] + len(token) + 1)
        spans, predictions = [], []
        for _ in range(n_spans):
            first = rng.randrange(n_words - 3)
            last = first + rng.randint(1, 3)
            start, end = starts[first], starts[last - 1] + len(tokens[last - 1])
            spans.append(Span(start, end, text[start:end], "TIMEX"))
            roll = rng.random()
            if roll < 0.5:
                predictions.append(text[start:end])
            elif roll < 0.8:
                predictions.append(" ".join(tokens[max(0, first - 1) : last]))
            if rng.random() < 0.2:
                predictions.append(rng.choice(VOCAB) + " " + rng.choice(VOCAB))
        pairs.append((Record(f"r{index}", "doc", text, spans, "bench"), predictions))
    return pairs


def bench_scoring(seed: int) -> dict:
    rng = random.Random(seed)
    sentences = synthetic_records(rng, 400, 25, 3)
    documents = synthetic_records(rng, 80, 400, 40)
    blocks = {}
    for name, pairs, words, spans, repeats in (
        ("sentences", sentences, 25, 3, 5),
        ("documents", documents, 400, 40, 3),
    ):
        seconds = best_of(functools.partial(score_pairs, pairs), repeats)
        variants = {}
        for variant in VARIANTS:
            variant_s = best_of(functools.partial(score_variant, pairs, variant), repeats)
            variants[variant] = {"seconds": variant_s, "ratio_to_score_pairs": variant_s / seconds}
        blocks[name] = {
            "instances": len(pairs),
            "words": words,
            "gold_spans_each": spans,
            "seconds": seconds,
            "instances_per_s": len(pairs) / seconds,
            "variants": variants,
            "token_variants_target_ratio": 1.0,
            "token_variants_met": all(variants[v]["ratio_to_score_pairs"] <= 1.0 for v in TOKEN_VARIANTS),
        }
    return blocks


def bench_paper_scale(
    seed: int,
    systems: int = 42,
    datasets: int = 13,
    n_instances: int = 400,
    resamples: int = 10_000,
    sample_pairs: int = 20,
) -> dict:
    rng = np.random.default_rng(seed)
    rates = rng.uniform(0.3, 0.8, size=systems)
    all_stats = [np.stack([synthetic_stats(rng, n_instances, r) for r in rates]) for _ in range(datasets)]

    def analysis():
        return [all_pairs_bootstrap(stats, resamples=resamples, seed=seed + d) for d, stats in enumerate(all_stats)]

    start = time.perf_counter()
    results = analysis()
    all_pairs_s = time.perf_counter() - start
    with_ci_s = best_of(
        lambda: [
            all_pairs_bootstrap(stats, resamples=resamples, seed=seed + d, with_delta_ci=True)
            for d, stats in enumerate(all_stats)
        ],
        1,
    )
    pair_rng = random.Random(seed)
    pairs = [(pair_rng.randrange(datasets), *pair_rng.sample(range(systems), 2)) for _ in range(sample_pairs)]
    start = time.perf_counter()
    max_difference = 0.0
    for d, i, j in pairs:
        single = paired_bootstrap(all_stats[d][i], all_stats[d][j], resamples=resamples, seed=seed + d)
        max_difference = max(max_difference, abs(single.p_value - results[d].p_value[i, j]))
    per_pair_s = (time.perf_counter() - start) / sample_pairs
    total_pairs = datasets * systems * (systems - 1) // 2
    return {
        "systems": systems,
        "datasets": datasets,
        "instances": n_instances,
        "resamples": resamples,
        "pairs": total_pairs,
        "all_pairs_s": all_pairs_s,
        "all_pairs_with_delta_ci_s": with_ci_s,
        "one_pair_at_a_time_s_per_pair": per_pair_s,
        "one_pair_at_a_time_extrapolated_s": per_pair_s * total_pairs,
        "sampled_pairs": sample_pairs,
        "speedup": per_pair_s * total_pairs / all_pairs_s,
        "target_s": 10.0,
        "max_p_value_difference_on_sampled_pairs": max_difference,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sample-pairs", type=int, default=20, help="pairs timed one at a time")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    load_before = os.getloadavg()
    paired = bench_paired(args.seed)
    scoring = bench_scoring(args.seed)
    paper = bench_paper_scale(args.seed, sample_pairs=args.sample_pairs)
    report = {
        "machine": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_average_1min_before_after": [load_before[0], os.getloadavg()[0]],
        },
        "paired_test": paired,
        "scoring": scoring,
        "paper_scale": paper,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")

    print(f"{'measurement':58} {'time (s)':>10} {'reference (s)':>14} {'ratio':>8}")
    for name, key in (("straightforward", "straightforward_loop"), ("tuned", "tuned_loop")):
        suffix = "straightforward" if name == "straightforward" else "tuned"
        print(
            f"{'paired test 10,000 x 400 vs ' + name + ' Python loop':58} {paired['vectorised_s']:10.4f} "
            f"{paired[key + '_s']:14.2f} {paired['speedup_vs_' + suffix]:7.0f}x"
        )
        print(
            f"{'  same, process CPU time':58} {paired['vectorised_cpu_s']:10.4f} "
            f"{paired[key + '_cpu_s']:14.2f} {paired['speedup_vs_' + suffix + '_cpu']:7.0f}x"
        )
    print(
        f"{'paper scale, 42 x 13 x 400 x 10,000 (vs pair at a time)':58} {paper['all_pairs_s']:10.2f} "
        f"{paper['one_pair_at_a_time_extrapolated_s']:14.1f} {paper['speedup']:7.0f}x"
    )
    print(f"{'paper scale with delta CIs':58} {paper['all_pairs_with_delta_ci_s']:10.2f}")
    for name, block in scoring.items():
        print(
            f"{'scoring ' + str(block['instances']) + ' ' + name:58} {block['seconds']:10.4f} "
            f"{'':14} {block['instances_per_s']:7.0f}/s"
        )
        for variant, timing in block["variants"].items():
            print(
                f"{'  variant ' + variant + ' (vs score_pairs)':58} {timing['seconds']:10.4f} "
                f"{block['seconds']:14.4f} {timing['ratio_to_score_pairs']:7.2f}x"
            )
    print(
        f"p-value vectorised {paired['p_value_vectorised']:.4f}, loops {paired['p_value_straightforward_loop']:.4f} "
        f"and {paired['p_value_tuned_loop']:.4f}; "
        f"max p difference on sampled pairs {paper['max_p_value_difference_on_sampled_pairs']:.2g}"
    )
    print(f"load average (1 min) before/after: {load_before[0]:.1f}/{os.getloadavg()[0]:.1f}; written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
