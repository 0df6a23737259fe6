"""The embedded SmolLM2 as shipped (Q4_1) against its llama.cpp re-quantisation (Q4_0), per token.

One single-thread llama.cpp context per file (as each backend worker runs), the same prompt: the
first ``--prompt-tokens`` tokens of this repository's README, evaluated in one call, then
``--decode`` greedy tokens one at a time. Each file is measured ``--repeats`` times, alternating,
and the fastest repeat kept, so a change in the machine's speed hits both alike. Recorded: prompt
and decode milliseconds per token, their ratios, and the greedy continuations (the files are
different weights; their text shows it).

Run: ``python benchmarks/bench_requantize.py`` (writes ``benchmarks/results/requantize.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

import numpy as np  # noqa: E402

from src.backends import create_backend  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "requantize.json"


def measure(llm, prompt: list[int], decode: int) -> tuple[float, float, str]:
    """``(prompt ms per token, decode ms per token, continuation)`` of one greedy pass."""
    llm.reset()
    started = time.perf_counter()
    llm.eval(prompt)
    prompt_s = time.perf_counter() - started
    tokens = []
    started = time.perf_counter()
    for _ in range(decode):
        logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),))
        tokens.append(int(np.argmax(logits)))
        llm.eval(tokens[-1:])
    decode_s = time.perf_counter() - started
    text = llm.detokenize(tokens).decode("utf-8", errors="replace")
    return 1000 * prompt_s / len(prompt), 1000 * decode_s / decode, text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt-tokens", type=int, default=600)
    parser.add_argument("--decode", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    from llama_cpp import Llama

    files = {
        "shipped Q4_1": create_backend("llamacpp", model_id="smollm2-135m-gguf").path,
        "re-quantised Q4_0": create_backend("llamacpp", model_id="smollm2-135m-gguf", requantize="Q4_0").path,
    }
    llms = {
        name: Llama(model_path=str(path), n_ctx=2048, n_batch=512, n_threads=1, n_threads_batch=1, verbose=False)
        for name, path in files.items()
    }
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    prompt = next(iter(llms.values())).tokenize(readme.encode("utf-8"))[: args.prompt_tokens]
    runs: dict[str, list] = {name: [] for name in llms}
    for _ in range(args.repeats):
        for name, llm in llms.items():
            runs[name].append(measure(llm, prompt, args.decode))
    rows = {}
    for name, measured in runs.items():
        rows[name] = {
            "file": files[name].name,
            "prompt_ms_per_token": round(min(m[0] for m in measured), 2),
            "decode_ms_per_token": round(min(m[1] for m in measured), 2),
            "continuation": measured[0][2],
        }
        print(
            f"{name:<18} prompt {rows[name]['prompt_ms_per_token']:6.2f} ms/tok  decode "
            f"{rows[name]['decode_ms_per_token']:6.2f} ms/tok  {measured[0][2][:40]!r}",
            flush=True,
        )
    shipped, derived = rows["shipped Q4_1"], rows["re-quantised Q4_0"]
    summary = {
        "prompt_speedup": round(shipped["prompt_ms_per_token"] / derived["prompt_ms_per_token"], 2),
        "decode_speedup": round(shipped["decode_ms_per_token"] / derived["decode_ms_per_token"], 2),
    }
    print(json.dumps(summary))
    out = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_average_at_end": os.getloadavg()},
        "command": "python benchmarks/bench_requantize.py " + " ".join(sys.argv[1:]),
        "settings": {"prompt_tokens": len(prompt), "decode_tokens": args.decode, "repeats": args.repeats, "threads": 1},
        "results": rows,
        "summary": summary,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
