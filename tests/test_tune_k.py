"""k selection on the validation split picks the k whose prompts score best."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from src.billing.ledger import read_ledger
from src.data.schema import write_records
from tests.helpers.openai_server import FakeOpenAIServer, last_user_message
from tests.helpers.paths import REPO_ROOT
from tests.helpers.records import make_record

TRAIN = [make_record(f"t{i}#s0", f"Report number {i} came on Friday .", [("Friday", "TIMEX")]) for i in range(12)]
VAL = [make_record("v1#s0", "They left on Monday .", [("Monday", "TIMEX")])]


def _answer_well_with_five_exemplars(body: dict) -> str:
    """A model that needs exactly five examples: fewer or more confuse it."""
    shown = last_user_message(body).count("Example ")
    return '["Monday"]' if shown == 5 else '["left"]'


def _tune(tmp_path: Path, server: FakeOpenAIServer, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["OPENROUTER_API_KEY"] = "sk-test"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "src.tune_k",
            "model=qwen3_moe",
            "strategy=I",
            "tasks=[timex]",
            f"model.options.base_url={server.base_url}",
            "model.options.backoff_base_s=0.01",
            "model.options.backoff_max_s=0.02",
            "model.options.max_retries=20",
            f"paths.prepared={tmp_path / 'prepared'}",
            f"paths.cache={tmp_path / 'cache'}",
            f"hydra.run.dir={tmp_path / 'outputs'}",
            f"+k_selection_output={tmp_path / 'k.json'}",
            f"budget.ledger_file={tmp_path / 'spend.json'}",
            "scoring.bootstrap_resamples=50",
            *extra,
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture()
def splits(tmp_path: Path) -> Path:
    write_records(tmp_path / "prepared/timex/train.jsonl", TRAIN)
    write_records(tmp_path / "prepared/timex/val.jsonl", VAL)
    return tmp_path


def test_tune_k_picks_the_best_validation_k(splits: Path):
    with FakeOpenAIServer(answer=_answer_well_with_five_exemplars) as server:
        done = _tune(splits, server)
        assert done.returncode == 0, done.stderr[-3000:]
        assert server.request_count == 3
    result = json.loads((splits / "k.json").read_text())["tasks"]["timex"]
    assert result["best_k"] == 5
    assert result["scores"] == {"3": 0.0, "5": 1.0, "8": 0.0}


@pytest.mark.slow  # two tune_k processes (Hydra start-up), about 30 s
def test_tune_k_is_capped_and_its_ledger_holds_the_servers_bill(splits: Path):
    """Regression: tune_k metered without a reservation: no cap held it and no ledger counted it.
    The server bills by its own rule (words, its own price, reported as usage.cost), billed
    null-content replies retried included."""
    server = FakeOpenAIServer(
        answer=_answer_well_with_five_exemplars,
        fault_rate=0.6,
        kinds=("null_content", "null_content", "null_content", "500"),
        seed=1,
        price_in_per_token=3e-7,
        price_out_per_token=9e-7,
    )
    with server:
        done = _tune(splits, server, "budget.max_cost_usd=0.0000001")
        assert done.returncode == 2, done.stderr[-3000:]
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and errors[0].startswith("error: budget: tune_k") and "would cost" in errors[0]
        assert server.request_count == 0 and not (splits / "k.json").exists()

        done = _tune(splits, server, "budget.max_cost_usd=1", "budget.ledger=pilot")
        assert done.returncode == 0, done.stderr[-3000:]
        assert server.billed["responses"] > 3, f"no billed fault was retried: {server.served_faults}"
        entries = read_ledger(splits / "spend.json")["ledgers"]["pilot"]
        assert len(entries) == 1 and entries[0]["cost_usd"] == pytest.approx(server.billed_cost)
        assert entries[0]["attempts"] == server.request_count and entries[0]["requests"] == 3
    assert json.loads((splits / "k.json").read_text())["tasks"]["timex"]["best_k"] == 5
