"""HTTP backend throughput against a loopback OpenAI-compatible server with fixed latency.

Every answer takes a fixed 200 ms, so at concurrency 32 the ideal is 32 / 0.2 s = 160 req/s;
the target is at least 80% of it. The reference, measured in the same run, is the same backend
at concurrency 1 (one request at a time: the ideal is 5 req/s), so the printed speedup shows
what the bounded concurrency buys. The server runs in its own process (as a real one would).
The machine's load average is recorded because the
benchmark shares its CPUs with other work.

Run: ``python benchmarks/bench_http.py`` (writes ``benchmarks/results/http.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

import httpx  # noqa: E402
import openai  # noqa: E402

from src.backends.openai_backend import OpenAIBackend  # noqa: E402
from src.core.requests import ChatRequest

PROJECT_ROOT = Path(__file__).resolve().parents[1]
RESULTS = PROJECT_ROOT / "benchmarks" / "results" / "http.json"


class ServerProcess:
    """The loopback server in its own process, so its CPU does not compete for our GIL."""

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.openai_server", "--latency", str(latency_s)],
            cwd=PROJECT_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.base_url = self.process.stdout.readline().strip()
        if not self.base_url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"loopback server did not start (printed {self.base_url!r})")

    def reset(self) -> None:
        httpx.post(f"{self.base_url}/_reset").raise_for_status()

    def stats(self) -> dict:
        return httpx.get(f"{self.base_url}/_stats").json()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=10)


def measure(server: ServerProcess, concurrency: int, count: int) -> dict:
    """Requests per second for ``count`` distinct requests at the given concurrency bound."""
    backend = OpenAIBackend(
        model_id="bench/model",
        base_url=server.base_url,
        max_concurrency=concurrency,
        timeout_s=30,
        max_retries=0,
        api_key_env="",
    )
    requests = [
        ChatRequest(
            (("system", "Extract time expressions."), ("user", f"Sentence number {i}.")),
            max_tokens=32,
            request_id=str(i),
        )
        for i in range(count)
    ]
    server.reset()
    started, cpu_started = time.perf_counter(), time.process_time()
    results = backend.generate(requests)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    stats = server.stats()
    return {
        "concurrency": concurrency,
        "requests": count,
        "failed": sum(r.text is None for r in results),
        "requests_seen_by_server": stats["requests"],
        "max_in_flight_seen_by_server": stats["max_in_flight"],
        "seconds": round(elapsed, 3),
        "requests_per_s": round(count / elapsed, 2),
        "ideal_requests_per_s": round(concurrency / server.latency_s, 2),
        "mean_latency_s": round(sum(r.latency_s for r in results) / count, 4),
        "client_cpu_ms_per_request": round(1000 * cpu / count, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--requests", type=int, default=640, help="requests at full concurrency")
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    load_before = os.getloadavg()
    server = ServerProcess(args.latency)
    try:
        measure(server, args.concurrency, args.concurrency)  # warm-up: connections, imports
        reference = measure(server, 1, 10)
        bounded = measure(server, args.concurrency, args.requests)
    finally:
        server.close()
    load_after = os.getloadavg()
    ratio = bounded["requests_per_s"] / bounded["ideal_requests_per_s"]
    result = {
        "machine": {
            "python": platform.python_version(),
            "openai": openai.__version__,
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_average_1_5_15_before": [round(x, 2) for x in load_before],
            "load_average_1_5_15_after": [round(x, 2) for x in load_after],
        },
        "server_latency_s": args.latency,
        "reference_concurrency_1": reference,
        "bounded": bounded,
        "fraction_of_ideal": round(ratio, 3),
        "target_fraction_of_ideal": 0.8,
        "meets_target": ratio >= 0.8,
        "speedup_over_concurrency_1": round(bounded["requests_per_s"] / reference["requests_per_s"], 2),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
