"""One cap, many runs at once: they never send more than the cap allows.

Runs of ``qwen25_7b`` / ``llama3_8b`` against the loopback server, started together, share one
``budget.max_cost_usd`` through a ledger (``budget.ledger`` for plain processes; a Hydra
multirun gets one per sweep folder). The server holds every answer until each run has either
reserved its planned ceiling or been refused, so the test sees the moment a naive
check-then-spend cap fails (every run passes the same check). Then: the runs that reserved
finish, the others sent nothing, the ledger holds exactly what the server billed, and that is
within the cap.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from src.billing.ledger import read_ledger
from src.plan import main as plan_main
from tests.helpers import scale_harness as harness
from tests.helpers.openai_server import OpenAIServer
from tests.helpers.paths import REPO_ROOT

pytestmark = pytest.mark.timeout(400)
# the server bills at the model files' list prices, so the provider's cost and the plan agree
PRICES = {"qwen/qwen-2.5-7b-instruct": (0.04e-6, 0.1e-6), "meta-llama/llama-3-8b-instruct": (0.03e-6, 0.06e-6)}


class GatedServer(OpenAIServer):
    """Holds every answer until :meth:`release` (the runs' reservations are made meanwhile)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        super().__init__(answer=self._held, report_cost=True)

    def _held(self, body: dict) -> str:
        self.gate.wait(300)
        return harness.answer(body)

    def release(self) -> None:
        self.gate.set()

    def completion(self, body: dict, text: str | None = None) -> dict:
        reply = super().completion(body, text)
        price_in, price_out = PRICES[body["model"]]
        usage = reply["usage"]
        usage["cost"] = usage["prompt_tokens"] * price_in + usage["completion_tokens"] * price_out
        return reply


def billed(server: GatedServer) -> float:
    """What the server charged: every answer it sent, at its reported cost."""
    total = 0.0
    for body in server.bodies:
        usage = OpenAIServer.completion(server, body, harness.answer(body))["usage"]
        price_in, price_out = PRICES[body["model"]]
        total += usage["prompt_tokens"] * price_in + usage["completion_tokens"] * price_out
    return total


def overrides(root: Path, server: OpenAIServer, model: str, strategy: str) -> list[str]:
    return [
        f"model={model}",
        f"strategy={strategy}",
        "dimension=base",
        "tasks=[timex]",
        "datasets=[base]",
        "limit=2",
        f"model.options.base_url={server.base_url}",
        "model.options.timeout_s=300",
        f"paths.prepared={root / 'prepared'}",
        f"budget.ledger_file={root / 'spend.json'}",
        "scoring.bootstrap_resamples=20",
    ]


def ceiling(root: Path, server: OpenAIServer, model: str, strategy: str) -> float:
    out = root / f"plan-{model}-{strategy}.json"
    extra = [f"paths.cache={root / 'plan-cache'}"]
    assert plan_main([*overrides(root, server, model, strategy), *extra, "--json", str(out)]) == 0
    return json.loads(out.read_text())["total"]["ceiling_cost_usd"]


def settle(root: Path, server: GatedServer, decided, timeout: float = 180) -> None:
    """Release the server once ``decided()`` says every run has reserved or been refused."""
    deadline = time.monotonic() + timeout
    while not decided():
        assert time.monotonic() < deadline, "the runs did not all decide in time"
        time.sleep(0.2)
    server.release()


def reservations(root: Path) -> int:
    path = root / "spend.json"
    return sum(len(v) for v in read_ledger(path)["reservations"].values()) if path.exists() else 0


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("OPENROUTER_API_KEY", "MLFLOW_TRACKING_URI")}


@pytest.mark.parametrize("processes", [2, 4])
def test_parallel_processes_under_one_cap_never_send_past_it(tmp_path: Path, processes: int):
    harness.write_workspace(tmp_path)
    with GatedServer() as server:
        one = ceiling(tmp_path, server, "qwen25_7b", "D")
        cap = (processes // 2 + 0.5) * one  # room for half the runs, not one more
        running = []
        for n in range(processes):
            own = [
                f"paths.cache={tmp_path / f'cache{n}'}",  # each would send all of its requests
                f"mlflow.tracking_uri=sqlite:///{tmp_path / f'mlflow{n}.db'}",
                f"hydra.run.dir={tmp_path / f'out{n}'}",
                "budget.ledger=shared",
                f"budget.max_cost_usd={cap!r}",
            ]
            command = [sys.executable, "-m", "src.run", *overrides(tmp_path, server, "qwen25_7b", "D"), *own]
            running.append(
                subprocess.Popen(
                    command, cwd=REPO_ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                )
            )
        settle(
            tmp_path, server, lambda: reservations(tmp_path) + sum(p.poll() is not None for p in running) == processes
        )
        outcomes = [(p.wait(timeout=300), p.stderr.read()) for p in running]
        sent = server.request_count
        charged = billed(server)
    finished = [err for code, err in outcomes if code == 0]
    refused = [err for code, err in outcomes if code == 2]
    assert len(finished) == processes // 2 and len(refused) == processes - processes // 2, outcomes
    assert all(
        "error: budget: qwen25_7b-D would cost" in err and "reserved by runs in progress" in err for err in refused
    )
    assert sent == 2 * len(finished)  # the refused runs sent nothing
    ledger = read_ledger(tmp_path / "spend.json")
    assert ledger["reservations"]["shared"] == []
    entries = ledger["ledgers"]["shared"]
    assert len(entries) == len(finished)
    assert sum(e["cost_usd"] for e in entries) == pytest.approx(charged, rel=1e-9)  # the ledger is the bill
    assert sum(e["cost_reported"] for e in entries) == pytest.approx(charged, rel=1e-9)
    assert charged <= cap


def test_a_joblib_sweep_under_one_cap_never_sends_past_it(tmp_path: Path):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher", reason="pip install -e '.[joblib]'")
    harness.write_workspace(tmp_path)
    with GatedServer() as server:
        ceilings = sorted(ceiling(tmp_path, server, m, s) for m in harness.MODELS for s in harness.STRATEGIES)
        assert sum(ceilings[:3]) > sum(ceilings[-2:])  # any two configurations fit the cap, no three
        cap = sum(ceilings[-2:]) * 1.001
        sweep_dir = tmp_path / "capped-multirun"
        result: dict = {}
        thread = threading.Thread(
            target=lambda: result.update(
                done=harness.sweep(
                    tmp_path,
                    "capped",
                    server.base_url,
                    f"sqlite:///{tmp_path / 'sweep.db'}",
                    launcher="local_joblib",
                    extra=[f"budget.ledger_file={tmp_path / 'spend.json'}", f"budget.max_cost_usd={cap!r}"],
                    env_extra={"TEMPGEN_N_JOBS": "4"},
                    timeout=360,
                )
            )
        )
        thread.start()
        started: dict[str, float] = {}

        def decided() -> bool:  # every job started (its folder) and had time to reserve or be refused
            for job in sweep_dir.glob("[0-9]*"):
                started.setdefault(job.name, time.monotonic())
            return len(started) == 4 and reservations(tmp_path) == 2 and time.monotonic() - max(started.values()) > 20

        settle(tmp_path, server, decided, timeout=240)
        thread.join(timeout=360)
        charged = billed(server)
        sent = server.request_count
    done = result["done"]
    assert done.returncode == 1, harness.describe(done)  # two jobs refused: the sweep fails, after the others finished
    refusals = [line for line in done.stderr.splitlines() if line.startswith("error: budget:")]
    assert len(refusals) == 2 and all("reserved by runs in progress" in line for line in refusals)
    (name,) = read_ledger(tmp_path / "spend.json")["ledgers"]
    assert name == f"multirun {sweep_dir.resolve()}"  # no ledger named: one per sweep folder
    ledger = read_ledger(tmp_path / "spend.json")
    entries = ledger["ledgers"][name]
    assert len(entries) == 2 and ledger["reservations"][name] == [] and sent == 4
    assert sum(e["cost_usd"] for e in entries) == pytest.approx(charged, rel=1e-9)
    assert charged <= cap
    finished = [
        r for r in harness.finished_runs(f"sqlite:///{tmp_path / 'sweep.db'}").values() if r["status"] == "FINISHED"
    ]
    assert len(finished) == 2


def test_billed_retries_stop_sending_at_the_cap_not_past_it(tmp_path: Path):
    """Every reply is a billed null content: without the in-run guard, 2 requests x 21 attempts would
    cost more than the plan; with it, the run stops sending before the server bills past the cap."""
    harness.write_workspace(tmp_path)
    price_in, price_out = PRICES["qwen/qwen-2.5-7b-instruct"]
    with OpenAIServer(
        answer=harness.answer,
        fault_rate=1.0,
        kinds=("null_content",),
        price_in_per_token=price_in,
        price_out_per_token=price_out,
    ) as server:
        cap = ceiling(tmp_path, server, "qwen25_7b", "D")  # the plan fits the cap exactly
        own = [
            f"paths.cache={tmp_path / 'cache'}",
            f"mlflow.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}",
            f"hydra.run.dir={tmp_path / 'out'}",
            f"budget.max_cost_usd={cap!r}",
            "model.options.stop_after_same_fault=null",
            "model.options.max_retries=20",  # without the guard: 2 x 21 billed attempts, far past the plan
            "model.options.backoff_base_s=0.01",
            "model.options.backoff_max_s=0.02",
        ]
        command = [sys.executable, "-m", "src.run", *overrides(tmp_path, server, "qwen25_7b", "D"), *own]
        done = subprocess.run(command, cwd=REPO_ROOT, env=env(), capture_output=True, text=True, timeout=300)
        charged, attempts = server.billed_cost, server.request_count
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "budget: stopped sending at $" in output and "Traceback" not in output
    assert 0 < charged <= cap and attempts < 2 * 21
