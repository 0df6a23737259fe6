"""Fine-tuning and inference throughput of the offline encoder on CPU, with a scored sanity check.

Trains ``--model`` (default the offline encoder, MiniLM) on the full train split of
``--task`` with the study's hyperparameters (params.yaml's ``finetune`` block) on ``--threads``
torch threads, then measures prediction examples/s on the base test set batched
(``--batch-size``) against a batch-size-1 reference on the same records, and the
windowed throughput on the ``len`` documents. The base predictions are scored with the
project metric (LCS F1 with a bootstrap CI) so the recorded speed belongs to a model
that works. The machine's load average is recorded: other processes share the CPU.

    python benchmarks/bench_finetune.py [--threads 2]   # adds a run to benchmarks/results/finetune.json

On a CPU shared with other busy processes, 2 OpenMP threads can be several times
slower than 1 (threads spin waiting for each other); record runs with both counts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def timed_predictions(classifier, records, batch_size: int) -> tuple[list[list[str]], float]:
    started = time.perf_counter()
    predictions = classifier.predict_spans(records, batch_size=batch_size)
    return predictions, time.perf_counter() - started


def record_run(path: Path, result: dict) -> None:
    """Keep one entry per (model, task, threads, overrides) in the results file, the newest winning."""

    def key(run: dict) -> tuple:
        overrides = json.dumps(run["training"].get("overrides", {}), sort_keys=True)
        return run["model"], run["task"], run["machine"]["torch_threads"], overrides

    runs = json.loads(path.read_text(encoding="utf-8")).get("runs", []) if path.is_file() else []
    runs = [r for r in runs if key(r) != key(result)] + [result]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"runs": runs}, indent=2) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--task", default="timex", choices=["timex", "eventx"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--reference-records", type=int, default=100, help="records predicted one at a time")
    parser.add_argument("--data-dir", default=str(ROOT / "data" / "prepared"))
    parser.add_argument("--keep", default=None, help="keep the checkpoint in this folder (default: a temp folder)")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "finetune.json"))
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a finetune value of params.yaml",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch
    import transformers

    from src.data.schema import read_records
    from src.finetune.predict import TokenClassifier, write_predictions
    from src.finetune.train import load_config, parse_overrides, run
    from src.score import score_files

    torch.set_num_threads(args.threads)
    data = Path(args.data_dir) / args.task
    values = {"num_threads": args.threads, "report_to": "none", "data_dir": args.data_dir}
    config = load_config(overrides={**values, **parse_overrides(args.overrides)})
    out = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_finetune_"))
    load_before = load_average()
    started = time.perf_counter()
    summary = run(args.model, args.task, out, config)
    stage_seconds = time.perf_counter() - started
    load_after_training = load_average()

    classifier = TokenClassifier.load(out)
    base = read_records(data / "base.jsonl")
    predictions, batched_seconds = timed_predictions(classifier, base, args.batch_size)
    reference = base[: args.reference_records]
    _, reference_seconds = timed_predictions(classifier, reference, 1)
    long_documents = read_records(data / "len.jsonl")
    _, len_seconds = timed_predictions(classifier, long_documents, args.batch_size)
    prediction_file = out / "base_predictions.jsonl"
    write_predictions(prediction_file, base, predictions)
    scores = score_files(str(data / "base.jsonl"), str(prediction_file), bootstrap=1000, seed=0)

    batched_rate = len(base) / batched_seconds
    reference_rate = len(reference) / reference_seconds
    result = {
        "benchmark": "finetune",
        "command": "python benchmarks/bench_finetune.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "load_average_1_5_15_before": load_before,
            "load_average_after_training": load_after_training,
            "load_average_end": load_average(),
            "note": "load averages above the core count mean other processes shared the CPU",
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
        "model": args.model,
        "task": args.task,
        "training": {
            "train_records": summary["n_train"],
            "val_records": summary["n_val"],
            "steps": summary["steps"],
            "epochs": summary["epochs"],
            "schedule": summary["schedule"],
            "wall_time_s": round(stage_seconds, 1),
            "train_time_s": round(summary["train_time_s"], 1),
            "eval_time_s": round(summary["eval_time_s"], 1),
            "examples_per_s": round(summary["train_examples_per_s"], 2),
            "examples_per_s_excluding_eval": round(summary["train_examples_per_s_excluding_eval"], 2),
            "best_val_f1": summary["best_val_f1"],
            "best_step": summary["best_step"],
            "overrides": parse_overrides(args.overrides),
            "params": summary["params"],
        },
        "inference": {
            "base_records": len(base),
            "batch_size": args.batch_size,
            "examples_per_s": round(batched_rate, 2),
            "reference_batch_size_1_records": len(reference),
            "reference_examples_per_s": round(reference_rate, 2),
            "speedup_vs_reference": round(batched_rate / reference_rate, 2),
            "len_documents": len(long_documents),
            "len_documents_per_s": round(len(long_documents) / len_seconds, 3),
        },
        "base_scores": {
            metric: {key: scores[metric][key] for key in ("precision", "recall", "f1", "ci95")}
            for metric in ("lcs", "strict", "relaxed")
        },
    }
    record_run(Path(args.output), result)
    print(json.dumps(result, indent=2))
    print(
        f"fine-tuning {args.model} on {summary['n_train']} {args.task} sentences: {stage_seconds:.0f} s wall "
        f"({summary['train_examples_per_s']:.1f} examples/s); inference {batched_rate:.1f} examples/s "
        f"= {batched_rate / reference_rate:.1f}x batch-size-1; base LCS F1 {scores['lcs']['f1']:.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
