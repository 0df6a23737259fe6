"""Parallel workers against threads for the llamacpp backend on the study's real prompts.

The same requests as ``bench_llamacpp.py`` (every strategy x task x base sentences and short
``len`` documents, constrained, prefix reuse on), answered three ways in one process:

- **reference**: 1 worker x 1 thread (the backend before parallel workers);
- **threads**: 1 worker x 2 threads (llama.cpp's own parallelism inside one context);
- **workers**: 2 workers x 1 thread (two contexts decoding at once from Python threads; the
  backend's default on 2 CPUs).

Reported: requests/s of each and its ratio to the reference, and whether the answers are
identical to the reference's (they must be: the answer depends only on the prompt). Measure
on an otherwise idle machine; threads and workers both need the two cores.

Run: ``python benchmarks/bench_llamacpp_workers.py`` (writes ``benchmarks/results/llamacpp_workers.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_llamacpp import MODEL, ROOT, build_requests, run_project, timed, write_results  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "llamacpp_workers.json"
LAYOUTS = {"reference_1x1": (1, 1), "threads_1x2": (1, 2), "workers_2x1": (2, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=4, help="base sentences per task")
    parser.add_argument("--documents", type=int, default=1, help="len documents per task (the shortest ones)")
    parser.add_argument("--max-tokens", type=int, default=64, help="the token cap of every request")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    requests = build_requests(args.sentences, args.documents, args.max_tokens)
    print(f"{len(requests)} requests, max_tokens {args.max_tokens}, load {os.getloadavg()[0]:.1f}", flush=True)
    rows = {}
    for name, (workers, threads) in LAYOUTS.items():
        label = f"{workers} worker(s) x {threads} thread(s)"
        rows[name] = timed(label, run_project(requests, threads, prefix_reuse=True, workers=workers))
    reference = rows["reference_1x1"]
    summary = {}
    for name, row in rows.items():
        row["ratio_to_reference"] = round(row["requests_per_s"] / reference["requests_per_s"], 2)
        same = sum(a == b for a, b in zip(row["texts"], reference["texts"]))
        row["identical_to_reference"] = f"{same}/{len(requests)}"
        summary[name] = {"ratio": row["ratio_to_reference"], "identical": row["identical_to_reference"]}
    for row in rows.values():
        del row["texts"]
    print(json.dumps(summary, indent=2))
    settings = {
        "requests": len(requests),
        "sentences_per_task": args.sentences,
        "documents_per_task": args.documents,
        "max_tokens": args.max_tokens,
        "model": MODEL,
    }
    write_results(args.out, settings, rows, summary)


if __name__ == "__main__":
    main()
