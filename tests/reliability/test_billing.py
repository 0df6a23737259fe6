"""The spend a run reports is what the provider billed, and every reply form has its meaning.

``python -m src.run model=qwen25_7b strategy=D`` on 40 instances against the loopback server,
which bills every completion it sends whole (tests/helpers/openai_server.py) and counts apart
what the bodies showed. Its tokens are counted at characters / 4, the rule the run estimates
with where a reply reports none, so an estimate can be checked against the truth.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from src.data.schema import Record, Span, write_records
from src.tracking.history import read_history
from tests.helpers.openai_server import OpenAIServer, last_user_message

ROOT = Path(__file__).resolve().parents[2]
WORDS = ["Friday", "today", "1998", "March", "noon", "yesterday", "2001", "Monday", "tonight", "May"]
N = 40
PRICE_IN, PRICE_OUT = 0.04e-6, 0.1e-6  # conf/model/qwen25_7b.yaml, per token


def quarter_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def _records() -> list[Record]:
    records = []
    for n in range(N):
        word = WORDS[n % len(WORDS)]
        text = f"Sentence {n} happened {word} ."
        start = text.index(word)
        records.append(Record(f"d{n}#s0", f"d{n}", text, [Span(start, start + len(word), word, "TIMEX")], "test"))
    return records


def _answer(body: dict) -> str:
    n = int(last_user_message(body).rstrip().split("Sentence ")[-1].split()[0])
    return json.dumps([WORDS[n % len(WORDS)]] if n % 3 else ["happened"])


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("billing")
    for split in ("base", "train"):
        write_records(root / "prepared" / "timex" / f"{split}.jsonl", _records())
    return root


def _server(**kwargs) -> OpenAIServer:
    return OpenAIServer(
        answer=_answer,
        count_tokens=quarter_tokens,
        price_in_per_token=PRICE_IN,
        price_out_per_token=PRICE_OUT,
        **kwargs,
    )


def _run(workspace: Path, server: OpenAIServer, name: str, *extra: str) -> subprocess.CompletedProcess:
    overrides = [
        "model=qwen25_7b",
        "strategy=D",
        "tasks=[timex]",
        "datasets=[base]",
        f"limit={N}",
        f"model.options.base_url={server.base_url}",
        "model.options.max_retries=6",
        "model.options.backoff_base_s=0.01",
        "model.options.backoff_max_s=0.02",
        "model.options.timeout_s=10",
        f"paths.prepared={workspace / 'prepared'}",
        f"paths.cache={workspace / name / 'cache'}",
        f"mlflow.tracking_uri=sqlite:///{workspace / name / 'mlflow.db'}",
        f"summary={workspace / name / 'summary.json'}",
        f"hydra.run.dir={workspace / name / 'outputs'}",
        "scoring.bootstrap_resamples=20",
        *extra,
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "OPENROUTER_API_KEY")}
    return subprocess.run(
        [sys.executable, "-m", "src.run", *overrides], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def _summary(workspace: Path, name: str) -> dict:
    return json.loads((workspace / name / "summary.json").read_text())


def _usage(workspace: Path, name: str) -> dict:
    """The run's ``usage.json`` total as logged (full precision; the summary keeps 6 decimals)."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{workspace / name / 'mlflow.db'}")
    run_id = read_history(workspace / name / "summary.json")["run_id"]
    folder = client.download_artifacts(run_id, "usage.json", str(workspace / name / "artifacts"))
    return json.loads(Path(folder).read_text())["total"]


@pytest.fixture(scope="module")
def fault_free(workspace: Path) -> dict:
    with _server() as server:
        done = _run(workspace, server, "clean")
    assert done.returncode == 0, done.stderr[-3000:]
    return _summary(workspace, "clean")


def test_the_spend_counted_is_what_the_server_billed_to_the_token(workspace: Path, fault_free: dict):
    kinds = ("no_usage", "no_cost", "null_content", "two_choices", "html", "500", "tool_calls", "stream_body")
    with _server(fault_rate=0.4, seed=36, kinds=kinds) as server:
        done = _run(workspace, server, "billed")
        served, billed, unshown = dict(server.served_faults), dict(server.billed), dict(server.billed_unshown)
        cost_shown, attempts_seen = server.billed_cost_shown, server.request_count
    assert done.returncode == 0, done.stderr[-3000:]
    assert set(served) == set(kinds), served  # every form was served
    summary = _summary(workspace, "billed")
    usage = _usage(workspace, "billed")
    # every attempt the server saw is counted; every reply it billed (also those then retried) is billed
    assert usage["attempts"] == attempts_seen and usage["billed_attempts"] == billed["responses"]
    assert usage["billed_attempts"] < usage["attempts"]  # the HTML pages and 500s were not billed
    # reported figures are the server's to the token; estimated ones are where the bodies showed none
    assert (
        usage["prompt_tokens"] - usage["estimated_prompt_tokens"] == billed["prompt_tokens"] - unshown["prompt_tokens"]
    )
    assert usage["completion_tokens"] - usage["estimated_completion_tokens"] == (
        billed["completion_tokens"] - unshown["completion_tokens"]
    )
    # where a body showed none, the estimate is the bound its attempt was admitted under: never below the bill
    assert usage["estimated_completion_tokens"] >= unshown["completion_tokens"] > 0
    assert usage["estimated_prompt_tokens"] >= unshown["prompt_tokens"] > 0
    assert usage["cost_reported"] == pytest.approx(cost_shown, rel=1e-9)
    assert usage["cost_price_table"] > 0 and usage["cost_estimated"] > 0  # no_cost and no_usage replies
    assert usage["cost"] == pytest.approx(usage["cost_reported"] + usage["cost_price_table"] + usage["cost_estimated"])
    # two choices were retried, never the first taken; answers in tool calls and event streams were read
    assert summary["metrics"] == fault_free["metrics"]
    assert "spent $" in done.stdout and "billed attempts of" in done.stdout


def test_flex_replies_are_priced_at_the_tier_that_served_them(workspace: Path, fault_free: dict):
    """OpenAI bills a flex request its standard tier served at the list price and says so in
    ``service_tier``; replies report no cost, so the run prices each at the tier it names."""

    def tier(body: dict) -> str:
        return "default" if int(last_user_message(body).rstrip().split("Sentence ")[-1].split()[0]) % 4 == 0 else "flex"

    flex_price = f"+model.price.flex={{input_per_mtok:{PRICE_IN * 1e6 / 2},output_per_mtok:{PRICE_OUT * 1e6 / 2}}}"
    with _server(report_cost=False, tier_of=tier) as server:
        done = _run(workspace, server, "flex", "model.options.mode=flex", flex_price)
        billed_cost, bodies = server.billed_cost, list(server.bodies)
    assert done.returncode == 0, done.stderr[-3000:]
    assert {body.get("service_tier") for body in bodies} == {"flex"}
    usage = _usage(workspace, "flex")
    assert usage["cost_price_table"] == pytest.approx(billed_cost, rel=1e-9) and usage["cost_estimated"] == 0
    all_flex = (PRICE_IN * usage["prompt_tokens"] + PRICE_OUT * usage["completion_tokens"]) / 2
    assert usage["cost"] > all_flex * 1.1  # a quarter served at the list price: not half price throughout
    assert _summary(workspace, "flex")["metrics"] == fault_free["metrics"]


def test_a_model_that_refuses_everything_is_answered_counted_and_flagged_never_retried(workspace: Path):
    with _server(fault_rate=1.0, kinds=("refusal",)) as server:
        done = _run(workspace, server, "refusals")
        seen, billed = server.request_count, dict(server.billed)
    assert done.returncode == 0, done.stderr[-3000:]
    assert seen == N and billed["responses"] == N  # one billed attempt each, not 7
    metrics = _summary(workspace, "refusals")["metrics"]["timex"]["base"]
    assert metrics["refusal_rate"] == 1.0 and metrics["f1"] == 0.0 and metrics["parse_failure_rate"] == 0.0
    usage = read_history(workspace / "refusals" / "summary.json")["usage"]
    assert usage["billed_attempts"] == N and usage["completion_tokens"] == billed["completion_tokens"]
    assert "refusals above 5%: timex/base 100.0%" in done.stdout
    entries = [json.loads(p.read_text()) for p in (workspace / "refusals" / "cache").glob("??/*.json")]
    assert len(entries) == N and all(e["refusal"].startswith("I'm sorry") and e["text"] == "" for e in entries)


def test_a_run_whose_replies_keep_failing_the_same_way_stops_early_naming_the_fault(workspace: Path):
    with _server(fault_rate=1.0, kinds=("null_content",)) as server:
        done = _run(workspace, server, "stopped", "model.options.max_concurrency=4")
        seen = server.request_count
    assert done.returncode == 1
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "stopped early" in line]
    assert lines and "the last 20 attempts" in lines[0] and "(null content)" in lines[0]
    assert seen <= 20 + 4  # not 7 attempts for each of 40 instances (280)
    assert "Traceback" not in done.stderr
    usage = read_history(workspace / "stopped" / "summary.json")["usage"]
    assert usage["attempts"] == seen and usage["billed_attempts"] == seen  # every null content was billed
