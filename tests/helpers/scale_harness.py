"""Shared pieces of the scale-out tests: a tiny prepared workspace, a deterministic fake
OpenAI-compatible model server on 127.0.0.1, and the ``python -m src.run -m`` sweep.

Every sweep is the same 2x2 grid: two API model configs (``qwen25_7b``, ``llama3_8b``, their
``base_url`` pointed at the loopback server) x strategies ``I`` and ``D``, on ``timex/base``
with ``limit=2``. The fake server's answer depends on the model id and the input sentence
only, so any launcher must log exactly the metrics of the sequential (basic launcher) sweep.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable
from pathlib import Path

from src.data.schema import write_records
from tests.helpers.openai_server import FakeOpenAIServer, last_user_message
from tests.helpers.paths import REPO_ROOT
from tests.helpers.records import make_record

MODELS = ("qwen25_7b", "llama3_8b")
STRATEGIES = ("I", "D")
RUN_NAMES = sorted(f"{m}-{s}" for m in MODELS for s in STRATEGIES)
# Metrics that measure time, not results: they differ between any two sweeps.
TIMING_METRICS = ("wall_time_s", ".usage.latency_s")

BASE = [
    make_record("b1#s0", "The board met on Friday and again in March .", ["Friday", "March"]),
    make_record("b2#s0", "Prices fell last week after two days of gains .", ["last week", "two days"]),
    make_record("b3#s0", "She moved to Paris in 1998 .", ["1998"]),
]
TRAIN = [
    make_record(f"t{n}#s0", text, [span])
    for n, (text, span) in enumerate(
        [
            ("He called yesterday .", "yesterday"),
            ("The talks resume on Monday .", "Monday"),
            ("Sales doubled in 2004 .", "2004"),
            ("They waited three hours .", "three hours"),
            ("The plant closed last year .", "last year"),
            ("Rain is expected tonight .", "tonight"),
        ]
    )
]
# (model id, inductive prompt?) -> input sentence -> answer: the two models differ, and each
# answers better when the prompt holds exemplars (strategy I), so all four runs differ.
ANSWERS = {
    ("qwen/qwen-2.5-7b-instruct", True): {
        BASE[0].text: '["Friday", "March"]',
        BASE[1].text: '["last week", "two days"]',
        BASE[2].text: '["1998"]',
    },
    ("qwen/qwen-2.5-7b-instruct", False): {
        BASE[0].text: '["Friday", "March"]',
        BASE[1].text: '["last week", "days"]',
        BASE[2].text: '["Paris", "1998"]',
    },
    ("meta-llama/llama-3-8b-instruct", True): {
        BASE[0].text: '```json\n["Friday"]\n```',
        BASE[1].text: '["last week"]',
        BASE[2].text: '["in 1998"]',
    },
    ("meta-llama/llama-3-8b-instruct", False): {
        BASE[0].text: '```json\n["Friday"]\n```',
        BASE[1].text: '["week"]',
        BASE[2].text: "none found",
    },
}


def answer(body: dict) -> str:
    """The canned answer: by model id, whether exemplars are in the prompt, and its input sentence."""
    message = last_user_message(body).rstrip()
    inductive = any(record.text in message for record in TRAIN)
    table = ANSWERS[body["model"], inductive]
    return next(text for sentence, text in table.items() if message.endswith(sentence))


def model_server() -> FakeOpenAIServer:
    return FakeOpenAIServer(answer=answer)


def write_workspace(root: Path) -> Path:
    """``root/prepared/timex/{base,train}.jsonl``; returns the prepared folder."""
    prepared = root / "prepared"
    write_records(prepared / "timex" / "base.jsonl", BASE)
    write_records(prepared / "timex" / "train.jsonl", TRAIN)
    return prepared


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def sweep(
    root: Path,
    name: str,
    base_url: str,
    tracking_uri: str,
    launcher: str | None = None,
    extra: Iterable[str] = (),
    env_extra: dict[str, str] | None = None,
    timeout: float = 240,
) -> subprocess.CompletedProcess:
    """The 2x2 multirun, with its own cache and sweep folder ``root/{name}-*``."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENROUTER_API_KEY", "MLFLOW_TRACKING_URI")}
    env["MLFLOW_TRACKING_URI"] = tracking_uri
    env["TOKENIZERS_PARALLELISM"] = "false"
    env.update(env_extra or {})
    overrides = [
        *([f"hydra/launcher={launcher}"] if launcher else []),
        f"model={','.join(MODELS)}",
        f"strategy={','.join(STRATEGIES)}",
        "dimension=base",
        "tasks=[timex]",
        "datasets=[base]",
        "limit=2",
        f"++model.options.base_url={base_url}",  # ++: the sweep parent composes the default model first
        f"paths.prepared={root / 'prepared'}",
        f"paths.cache={root / f'{name}-cache'}",
        f"hydra.sweep.dir={root / f'{name}-multirun'}",
        "scoring.bootstrap_resamples=50",
        *extra,
    ]
    return subprocess.run(
        [sys.executable, "-m", "src.run", "-m", *overrides],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def finished_runs(tracking_uri: str, experiment: str = "tempgen") -> dict[str, dict]:
    """run name -> {"run_id", "status", "metrics" (timing metrics dropped)} of an experiment."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no experiment {experiment!r} in {tracking_uri}"
    out = {}
    for run in client.search_runs([found.experiment_id]):
        metrics = {k: v for k, v in run.data.metrics.items() if not any(t in k for t in TIMING_METRICS)}
        assert run.info.run_name not in out, f"two runs named {run.info.run_name}"
        out[run.info.run_name] = {"run_id": run.info.run_id, "status": run.info.status, "metrics": metrics}
    return out


def describe(done: subprocess.CompletedProcess) -> str:
    return f"exit {done.returncode}\n--- stdout\n{done.stdout[-2000:]}\n--- stderr\n{done.stderr[-4000:]}"


def wait_http(url: str, timeout: float, process: subprocess.Popen | None = None) -> None:
    """Poll ``url`` until it answers 200 (or the process dies, or time runs out)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before answering {url}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError as error:  # refused while starting
            last = error
        time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f} s ({last})")


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))
