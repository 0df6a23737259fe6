"""Requests per second of the llamacpp backend on the default profile's real prompts.

The request set is every strategy (I, D, A, D+I, A+I, A+D, A+D+I) x task (timex, eventx, comp)
x a few base sentences and ``len`` documents, built by ``src.runs.prompted.PromptedSystem`` from the
config the default profile composes (the committed ``sweep.yaml``: the embedded model under
its own condition, completion prompts, answers constrained to JSON with spans drawn from the
input, the profile's token budgets, documents of at most its ``max_input_words``). Three ways
of answering it, in one process, on the embedded SmolLM2-135M GGUF, each engine given the
whole machine as a user would run it (``--threads N`` pins every engine to N threads instead):

- **project**: ``LlamaCppBackend`` as the model file configures it (one single-thread context
  per CPU): requests sorted so that prompts sharing a prefix run back to back, the shared
  prefix kept in the KV cache, decoding constrained by the answer's JSON schema and stopped
  when the JSON value is complete; also with one context (``project_one_worker``);
- **(a) plain llama.cpp**: on the same GGUF file (the re-quantised copy where the model file
  sets ``requantize``), ``llama_cpp.Llama`` (``create_completion``, or
  ``create_chat_completion`` for a chat prompt) one request at a time in the given order, the
  context reset before each (no prefix reuse), unconstrained, greedy, its default threads;
- **(b) transformers**: ``TransformersBackend`` on the same weights at batch size 16 (its own
  shared-prefix pass and stop-on-JSON included), unconstrained, torch on every CPU.

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
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere
os.chdir(ROOT)  # the config's paths (params.yaml) are relative to the repository
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import yaml  # noqa: E402

from src.backends import create_backend  # noqa: E402
from src.billing.meter import Meter  # noqa: E402
from src.config.schema import RunConfig  # noqa: E402
from src.core.requests import ChatRequest  # noqa: E402
from src.prompts import STRATEGY_NAMES  # noqa: E402
from src.runs.configure import planned_records  # noqa: E402
from src.runs.offline import load_config  # noqa: E402
from src.runs.prompted import PromptedSystem  # noqa: E402
from src.scoring.system import DatasetPlan  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "llamacpp.json"
PROFILE = ROOT / "sweep.yaml"  # the default profile (another one after `cp conf/profiles/NAME.yaml sweep.yaml`)
TASKS = ("timex", "eventx", "comp")


def profile_config(strategy: str) -> RunConfig:
    """The typed config a default-profile ``run@`` stage builds for ``strategy`` (dvc.yaml's overrides)."""
    sweep = yaml.safe_load(PROFILE.read_text())["sweep"]
    overrides = [
        f"model={sweep['models'][0]}",
        f"strategy={strategy}",
        f"condition={sweep['condition']}",
        f"max_input_words={sweep['max_input_words']}",
        f"generation.max_tokens={sweep['max_tokens']}",
        f"generation.max_tokens_document={sweep['max_tokens_document']}",
    ]
    return load_config(overrides)


def build_requests(sentences: int, documents: int) -> tuple[list[ChatRequest], dict]:
    """The profile's requests for a few base sentences and short documents per task and strategy."""
    requests, model_options = [], {}
    for name in STRATEGY_NAMES:
        config = profile_config(name)
        model_options = {"model_id": config.model.model_id, **config.model.options}
        system = PromptedSystem(config, None, Meter(config.model.price))
        max_words, seed = config.max_input_words, config.seed
        for task in TASKS:
            for dataset, count in (("base", sentences), ("len", documents)):
                if not count:
                    continue
                path = config.dataset_file(task, dataset)
                plan = DatasetPlan(task, dataset, path, planned_records(path, count, seed, max_words))
                for request in system.requests(plan):
                    requests.append(replace(request, request_id=f"{name}/{task}/{dataset}/{request.request_id}"))
    return requests, model_options


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


def run_project(
    requests: list[ChatRequest], options: dict, prefix_reuse: bool, threads: int | None, workers: int | None
):
    """The project backend as the model file configures it (``workers``/``threads`` override it)."""
    options = {**options, "prefix_reuse": prefix_reuse}
    if threads is not None:
        options["n_threads"] = threads
    if workers is not None:
        options["workers"] = workers
    backend = create_backend("llamacpp", **options)
    backend.load()

    def run():
        results = backend.generate(requests)
        texts = [r.text for r in results]
        reasons = [r.finish_reason for r in results]
        return (
            texts,
            sum(r.usage.get("completion_tokens", 0) for r in results),
            {
                "workers": backend.workers,
                "threads_per_worker": backend.n_threads,
                "prefix_hit_rate": round(backend.prefix_hit_rate, 4),
                "finish_length": reasons.count("length"),
                "errors": sum(not r.ok for r in results),
            },
        )

    return run


def run_plain(requests: list[ChatRequest], options: dict, threads: int | None):
    """llama-cpp-python's own loop, one request at a time, with its default threads unless pinned."""
    from llama_cpp import Llama

    pinned = {} if threads is None else {"n_threads": threads, "n_threads_batch": threads}
    path = create_backend("llamacpp", **options).path  # the same file the project runs (re-quantised or not)
    llm = Llama(model_path=str(path), n_ctx=int(options.get("n_ctx", 8192)), verbose=False, **pinned)

    def run():
        texts, tokens = [], 0
        for request in requests:
            llm.reset()  # no prefix reuse: every prompt evaluated from scratch
            greedy = {"max_tokens": request.max_tokens, "temperature": 0.0, "repeat_penalty": 1.0}
            if request.completion:
                out = llm.create_completion(request.messages[0][1], **greedy)
                texts.append(out["choices"][0]["text"])
            else:
                out = llm.create_chat_completion(messages=request.message_dicts(), **greedy)
                texts.append(out["choices"][0]["message"]["content"])
            tokens += out["usage"]["completion_tokens"]
        return texts, tokens, {"threads": llm.n_threads, "threads_batch": llm.n_threads_batch}

    return run


def run_transformers(requests: list[ChatRequest], options: dict, threads: int | None):
    same_weights = {k: options[k] for k in ("gguf_package", "gguf_file", "requantize") if options.get(k)}
    backend = create_backend(
        "transformers", model_id=options["model_id"], device="cpu", batch_size=16, num_threads=threads, **same_weights
    )
    backend.load()
    plain = [replace(r, response_schema=None) for r in requests]  # unconstrained: it has no grammar

    def run():
        results = backend.generate(plain)
        return (
            [r.text for r in results],
            sum(r.usage.get("completion_tokens", 0) for r in results),
            {"threads": backend.num_threads or len(os.sched_getaffinity(0)), "errors": sum(not r.ok for r in results)},
        )

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=2, help="base sentences per task")
    parser.add_argument("--documents", type=int, default=1, help="len documents per task (within max_input_words)")
    parser.add_argument(
        "--threads", type=int, default=None, help="pin every engine to this many threads (default: each its own)"
    )
    parser.add_argument("--no-transformers", action="store_true")
    parser.add_argument("--no-check-reuse", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    requests, options = build_requests(args.sentences, args.documents)
    print(
        f"{len(requests)} requests ({args.sentences} sentences + {args.documents} documents x 3 tasks x 7 strategies), "
        f"default profile condition, threads {args.threads or 'per engine'}, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    rows = {"project": timed("project (reuse + grammar)", run_project(requests, options, True, args.threads, None))}
    rows["project_one_worker"] = timed("project, one worker", run_project(requests, options, True, args.threads, 1))
    if not args.no_check_reuse:
        rows["project_no_reuse"] = timed(
            "project, prefix reuse off", run_project(requests, options, False, args.threads, None)
        )
    rows["plain_llamacpp"] = timed("(a) plain llama.cpp", run_plain(requests, options, args.threads))
    if not args.no_transformers:
        rows["transformers_b16"] = timed("(b) transformers batch 16", run_transformers(requests, options, args.threads))

    project = rows["project"]["requests_per_s"]
    summary = {
        "speedup_vs_plain_llamacpp": round(project / rows["plain_llamacpp"]["requests_per_s"], 2),
        "target_vs_plain_llamacpp": 1.5,
    }
    if "transformers_b16" in rows:
        summary["speedup_vs_transformers_b16"] = round(project / rows["transformers_b16"]["requests_per_s"], 2)
        summary["target_vs_transformers_b16"] = 5.0
    one = rows["project_one_worker"]
    summary["workers_speedup"] = round(project / one["requests_per_s"], 2)
    same = sum(a == b for a, b in zip(rows["project"]["texts"], one["texts"]))
    summary["identical_answers_with_one_and_all_workers"] = f"{same}/{len(requests)}"
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
        "max_tokens": sorted({r.max_tokens for r in requests}),
        "completion_prompts": sum(r.completion for r in requests),
        "constrained": sum(r.response_schema is not None for r in requests),
        "threads": args.threads,
        "profile": str(PROFILE.relative_to(ROOT)),
        "strategies": list(STRATEGY_NAMES),
        "tasks": list(TASKS),
        "model": options,
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
