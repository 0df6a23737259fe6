"""k selection on the validation split picks the k whose prompts score best."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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


def test_tune_k_picks_the_best_validation_k(tmp_path: Path):
    write_records(tmp_path / "prepared/timex/train.jsonl", TRAIN)
    write_records(tmp_path / "prepared/timex/val.jsonl", VAL)
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["OPENROUTER_API_KEY"] = "sk-test"
    with FakeOpenAIServer(answer=_answer_well_with_five_exemplars) as server:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "src.tune_k",
                "model=qwen3_moe",
                "strategy=I",
                "tasks=[timex]",
                f"model.options.base_url={server.base_url}",
                f"paths.prepared={tmp_path / 'prepared'}",
                f"paths.cache={tmp_path / 'cache'}",
                f"hydra.run.dir={tmp_path / 'outputs'}",
                f"+k_selection_output={tmp_path / 'k.json'}",
                "scoring.bootstrap_resamples=50",
            ],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert server.request_count == 3
    result = json.loads((tmp_path / "k.json").read_text())["tasks"]["timex"]
    assert result["best_k"] == 5
    assert result["scores"] == {"3": 0.0, "5": 1.0, "8": 0.0}
