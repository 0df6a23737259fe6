"""Calibration of the verdicts on simulated studies whose answer is known (the long run of
tests/scoring/test_calibrated.py).

For each number of documents, ``--studies`` studies are drawn (src.scoring.simulation: 1-10
sentences per document, about 30% of sentences with no gold span, between-document spread 1 on
the logit scale) and compared with :func:`src.scoring.calibrated.compare_documents` at alpha 0.05
and margin 0.02:

* null (two exchangeable systems): the share of studies given a verdict (enough documents with
  gold), the false better/worse rate, and the coverage of the 95% interval of the difference;
  beside them the landed report's rule (the smaller one-sided percentile-bootstrap p of resampled
  documents against alpha) on the same studies;
* at the margin (system B worse by exactly the margin, its skill found by bisection on 200,000
  documents): the false equivalence rate and the coverage;
* the gap on sets that share no sentence (:func:`src.scoring.calibrated.compare_unpaired`, e.g.
  ``t2c`` against base): one system on two independent draws of documents, false better/worse
  and coverage;
* the report's family (:func:`src.scoring.calibrated.compare_all_pairs`, Holm over the 21 pairs of
  7 exchangeable systems on one dataset, as the default profile's 7 strategies): the family-wise
  false better/worse rate.

Monte Carlo sd of a rate p over n decided studies: sqrt(p (1 - p) / n).
Run: ``python benchmarks/bench_calibration.py [--studies 2000]`` (writes results/calibration.json
and prints the markdown table of docs/scoring.md#calibration).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from src.scoring.calibrated import compare_all_pairs, compare_documents, compare_unpaired  # noqa: E402
from src.scoring.simulation import Design, System, draw_documents, skill_for_delta, true_delta  # noqa: E402
from src.scoring.stats import holm, p_better, resample_counts  # noqa: E402

ALPHA, MARGIN = 0.05, 0.02
SIZES = (1, 3, 6, 10, 20, 40, 78, 200)  # 78: the paper profile's timex base (400 sentences of 78 documents)


def _bootstrap_rule(a: np.ndarray, b: np.ndarray, seed: np.random.Generator) -> bool:
    counts = resample_counts(a.shape[0], 1000, seed)
    x, y = counts @ a, counts @ b
    f1 = lambda s: 2 * s[:, 0] / np.maximum(s[:, 1] + s[:, 2], 1e-300)  # noqa: E731
    p = float(p_better(f1(x) - f1(y)))
    return min(p, 1 - p) < ALPHA


def _row(documents: int, systems, truth: float, studies: int, seed: int, old: bool) -> dict:
    rng = np.random.default_rng(seed)
    design = Design(documents)
    decided = wrong = equivalent = covered = old_wrong = 0
    for _ in range(studies):
        stats, _ = draw_documents(design, systems, rng)
        if old and stats[0][:, 2].sum() > 0:
            old_wrong += _bootstrap_rule(stats[0], stats[1], rng)
        verdict = compare_documents(stats[0], stats[1], ALPHA, MARGIN, permutations=2000, seed=rng)
        if verdict.reason:
            continue
        decided += 1
        wrong += verdict.verdict in ("better", "worse")
        equivalent += verdict.verdict == "equivalent"
        covered += verdict.ci_low <= truth <= verdict.ci_high
    rate = lambda k: k / decided if decided else float("nan")  # noqa: E731
    return {
        "documents": documents,
        "studies": studies,
        "decided": decided,
        "false_better_worse": rate(wrong),
        "equivalent": rate(equivalent),
        "coverage": rate(covered),
        "bootstrap_rule_false_better_worse": old_wrong / studies if old else None,
    }


def _unpaired_row(documents: int, studies: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    design = Design(documents)
    decided = wrong = covered = 0
    for _ in range(studies):
        a = draw_documents(design, (System(),), rng)[0][0]
        b = draw_documents(design, (System(),), rng)[0][0]
        verdict = compare_unpaired(a, b, ALPHA, MARGIN, permutations=2000, seed=rng)
        if verdict.reason:
            continue
        decided += 1
        wrong += verdict.verdict in ("better", "worse")
        covered += verdict.ci_low <= 0.0 <= verdict.ci_high
    rate = lambda k: k / decided if decided else float("nan")  # noqa: E731
    return {
        "documents": documents,
        "studies": studies,
        "decided": decided,
        "false_better_worse": rate(wrong),
        "coverage": rate(covered),
    }


def _family_row(documents: int, systems: int, studies: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    design = Design(documents)
    decided = wrong = 0
    for _ in range(studies):
        stats, _ = draw_documents(design, (System(),) * systems, rng)
        tests = compare_all_pairs(stats, None, ALPHA, MARGIN, permutations=2000, seed=rng)
        if tests.reason:
            continue
        decided += 1
        upper = np.triu_indices(systems, 1)
        wrong += bool((holm(tests.p_value[upper]) < ALPHA).any())
    return {
        "documents": documents,
        "systems": systems,
        "studies": studies,
        "decided": decided,
        "familywise_false_better_worse": wrong / decided if decided else float("nan"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=2000)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "calibration.json"))
    args = parser.parse_args()
    started = time.perf_counter()
    null = [_row(d, (System(), System()), 0.0, args.studies, d, True) for d in SIZES]
    margin = []
    for documents in (20, 78, 200):
        b = skill_for_delta(Design(documents), MARGIN)
        truth = true_delta(Design(documents), (System(), b))
        margin.append({**_row(documents, (System(), b), truth, args.studies, 1000 + documents, False), "truth": truth})
    unpaired = [_unpaired_row(d, args.studies, 2000 + d) for d in (6, 20, 78)]
    family = [_family_row(d, 7, args.studies // 2, 3000 + d) for d in (10, 78)]
    result = {
        "command": "python benchmarks/bench_calibration.py --studies " + str(args.studies),
        "machine": platform.processor() or platform.machine(),
        "load_average": os.getloadavg(),
        "seconds": round(time.perf_counter() - started, 1),
        "null": null,
        "margin": margin,
        "unpaired": unpaired,
        "family": family,
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    sd = lambda p, n: 3 * math.sqrt(p * (1 - p) / n) if n else float("nan")  # noqa: E731
    print("| documents | studies given a verdict | false better/worse (3 sd) | bootstrap rule's | coverage (3 sd) |")
    print("|---|---|---|---|---|")
    for row in null:
        n = row["decided"]
        if not n:
            print(
                f"| {row['documents']} | 0 of {row['studies']} (inconclusive: too few documents) | - | "
                f"{row['bootstrap_rule_false_better_worse']:.3f} | - |"
            )
            continue
        print(
            f"| {row['documents']} | {n} of {row['studies']} | {row['false_better_worse']:.3f} ({sd(ALPHA, n):.3f}) | "
            f"{row['bootstrap_rule_false_better_worse']:.3f} | {row['coverage']:.3f} ({sd(0.05, n):.3f}) |"
        )
    print()
    print("| documents | true delta | false equivalent (3 sd) | coverage (3 sd) |")
    print("|---|---|---|---|")
    for row in margin:
        n = row["decided"]
        print(
            f"| {row['documents']} | {row['truth']:.4f} | {row['equivalent']:.3f} ({sd(ALPHA, n):.3f}) | "
            f"{row['coverage']:.3f} ({sd(0.05, n):.3f}) |"
        )
    print()
    print("| documents per set | studies given a verdict | false better/worse (3 sd) | coverage (3 sd) |")
    print("|---|---|---|---|")
    for row in unpaired:
        n = row["decided"]
        print(
            f"| {row['documents']} | {n} of {row['studies']} | {row['false_better_worse']:.3f} ({sd(ALPHA, n):.3f}) | "
            f"{row['coverage']:.3f} ({sd(0.05, n):.3f}) |"
        )
    print()
    print("| documents | systems | studies given verdicts | family-wise false better/worse, Holm (3 sd) |")
    print("|---|---|---|---|")
    for row in family:
        n = row["decided"]
        print(
            f"| {row['documents']} | {row['systems']} | {n} of {row['studies']} | "
            f"{row['familywise_false_better_worse']:.3f} ({sd(ALPHA, n):.3f}) |"
        )
    print(f"\n{result['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
