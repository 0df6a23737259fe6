"""Local generation throughput of the transformers backend at batch sizes 1, 8 and 32.

The embedded SmolLM2-135M GGUF generates up to 32 new tokens (greedy) for short extraction
prompts, in one process: batch size 1 is the reference, and the target is batch 32 at least
8 times its tokens/s on 2 CPU cores. Throughput counts generated tokens up to each answer's
end-of-sequence (padding after an early stop is not counted, though it costs time). The
machine's load average and the process's CPU time are recorded because other work shares
the cores; CPU seconds per token is less sensitive to that sharing than wall time.

``--threads 2 1`` repeats the sweep at each torch thread count: on a shared machine one thread
per process can beat two, whose OpenMP barriers wait for a descheduled core.

Run: ``python benchmarks/bench_generation.py --threads 2 1`` (writes
``benchmarks/results/generation.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

from src.backends.transformers_backend import TransformersBackend  # noqa: E402
from src.core.requests import ChatRequest

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "generation.json"
SYSTEM = "You extract time expressions. Answer with a JSON array of the exact strings, then explain briefly."
SENTENCES = [
    "The company said on Monday that profits fell 5% in the third quarter.",
    "Officials will meet again next week to discuss the proposal.",
    "He has lived in Boston since 1998 and plans to retire in two years.",
    "The storm hit the coast early Tuesday morning, hours after the warning.",
    "Shares closed higher yesterday after a volatile session.",
    "The trial is expected to last about three months.",
    "She visits her parents every Sunday afternoon.",
    "The agreement expires at midnight on December 31.",
    "Sales have risen for four consecutive quarters.",
    "The patient was admitted last night with chest pain.",
    "The band will tour Europe this summer before recording in the fall.",
    "Inflation slowed in March for the first time in a year.",
    "The bridge, built in the 1930s, was closed for repairs last month.",
    "Voting begins at 7 a.m. and ends at 8 p.m. local time.",
    "The law took effect on January 1, 2020.",
    "Negotiations broke down late Friday after ten hours of talks.",
    "The museum is open daily except on public holidays.",
    "Two weeks ago the board approved the merger.",
    "The spacecraft will reach orbit in about six minutes.",
    "The factory produced 20,000 cars in the first half of the year.",
    "Doctors monitored her for 48 hours before discharge.",
    "The festival returns next spring after a two-year pause.",
    "By the end of the decade, demand is expected to double.",
    "He resigned in October, weeks before the election.",
    "The drought has lasted since the summer of 2021.",
    "Trading was suspended for an hour on Wednesday.",
    "The school year starts in early September.",
    "Rates were cut twice during the previous year.",
    "The report, released this morning, covers the past decade.",
    "Flights resumed at noon after a brief delay.",
    "The statue has stood in the square for centuries.",
    "Earnings will be announced later today.",
]


def requests_for(count: int, max_tokens: int) -> list[ChatRequest]:
    return [
        ChatRequest(
            (("system", SYSTEM), ("user", SENTENCES[i % len(SENTENCES)])), max_tokens=max_tokens, request_id=str(i)
        )
        for i in range(count)
    ]


def measure(backend: TransformersBackend, batch_size: int, count: int, max_tokens: int) -> dict:
    backend.batch_size = batch_size
    requests = requests_for(count, max_tokens)
    started, cpu_started = time.perf_counter(), time.process_time()
    results = backend.generate(requests)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    if any(r.text is None for r in results):
        raise RuntimeError(f"generation failed: {[r.error for r in results if r.text is None]}")
    tokens = sum(r.usage["completion_tokens"] for r in results)
    return {
        "batch_size": batch_size,
        "prompts": count,
        "generated_tokens": tokens,
        "mean_prompt_tokens": round(sum(r.usage["prompt_tokens"] for r in results) / count, 1),
        "seconds": round(elapsed, 3),
        "tokens_per_s": round(tokens / elapsed, 2),
        "cpu_seconds": round(cpu, 2),
        "cpu_ms_per_token": round(1000 * cpu / tokens, 2),
        "load_average_1min_after": round(os.getloadavg()[0], 2),
    }


def sweep(backend: TransformersBackend, threads: int, max_tokens: int) -> dict:
    """Batch sizes 1, 8 and 32 at one torch thread count; batch 1 is the reference."""
    torch.set_num_threads(threads)
    backend.generate(requests_for(2, 4))  # warm-up: first-call allocations and kernel selection
    plan = {1: 4, 8: 8, 32: 32}  # batch size -> prompts (one batch each for 8 and 32)
    runs = [measure(backend, size, count, max_tokens) for size, count in plan.items()]
    speedup = runs[-1]["tokens_per_s"] / runs[0]["tokens_per_s"]
    return {
        "torch_threads": threads,
        "runs": runs,
        "speedup_batch32_over_batch1": round(speedup, 2),
        "cpu_efficiency_batch32_over_batch1": round(runs[0]["cpu_ms_per_token"] / runs[-1]["cpu_ms_per_token"], 2),
        "meets_target": speedup >= 8,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-gguf")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=[len(os.sched_getaffinity(0))],
        help="torch CPU thread counts to sweep (default: all allowed CPUs)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    load_before = os.getloadavg()
    backend = TransformersBackend(args.model, device=args.device, num_threads=args.threads[0])
    started = time.perf_counter()
    backend.load()
    load_s = time.perf_counter() - started
    sweeps = [sweep(backend, threads, args.max_tokens) for threads in args.threads]
    result = {
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_average_1_5_15_before": [round(x, 2) for x in load_before],
            "load_average_1_5_15_after": [round(x, 2) for x in os.getloadavg()],
        },
        "model": args.model,
        "device": backend.device,
        "dtype": backend.dtype,
        "share_prefix": backend.share_prefix,
        "max_new_tokens": args.max_tokens,
        "load_seconds": round(load_s, 1),
        "target_speedup": 8,
        "sweeps": sweeps,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
