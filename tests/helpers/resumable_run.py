"""A prompted run in a subprocess against the loopback fake server, for the kill/interrupt/store tests.

Nine one-word sentences; half of the answers are right, so the metrics a resume must reproduce
are not trivial.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from src.data.schema import Record
from tests.helpers.openai_server import FakeOpenAIServer, last_user_message
from tests.helpers.records import make_record

WORDS = ["Friday", "today", "1998", "March", "noon", "yesterday", "2001", "Monday", "tonight"]


def records() -> list[Record]:
    return [make_record(f"d{n}#s0", f"Sentence {n} happened {word} .", [word]) for n, word in enumerate(WORDS)]


def answer(body: dict) -> str:
    """Half of the answers are right, the rest find the wrong word: metrics are not trivial."""
    message = last_user_message(body).rstrip()
    n = int(message.split("Sentence ")[-1].split()[0])
    return json.dumps([WORDS[n]] if n % 2 == 0 else ["happened"])


def command(workspace: Path, server: FakeOpenAIServer) -> list[str]:
    return [
        sys.executable,
        "-m",
        "src.run",
        "model=qwen25_7b",
        "strategy=D",
        "dimension=base",
        "tasks=[timex]",
        f"model.options.base_url={server.base_url}",
        "model.options.max_concurrency=2",
        "model.options.max_retries=0",
        f"paths.prepared={workspace / 'prepared'}",
        f"paths.cache={workspace / 'cache'}",
        f"mlflow.tracking_uri=sqlite:///{workspace / 'mlflow.db'}",
        f"summary={workspace / 'summary.json'}",
        f"hydra.run.dir={workspace / 'outputs'}",
        "scoring.bootstrap_resamples=100",
    ]


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "OPENROUTER_API_KEY")}


def cached_prompts(cache: Path) -> set[str]:
    prompts = set()
    for entry in cache.glob("??/*.json"):
        fields = json.loads(entry.read_text())["fields"]
        prompts.add(fields["messages"][-1][1].rstrip())
    return prompts


def final_metrics(workspace: Path) -> dict[str, float]:
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{workspace / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tempgen")
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])
    assert [r.info.status for r in runs].count("RUNNING") == 0, [r.info.status for r in runs]
    final = runs[-1]
    assert final.info.status == "FINISHED"
    return {
        k: v
        for k, v in final.data.metrics.items()
        if not k.startswith(("wall_time", "timex.base.usage", "usage.", "concurrency_"))
    }
