"""Batches against a provider that does not behave: a batch in flight at Ctrl-C and at SIGKILL,
a create the provider accepted and answered 502, duplicated and unnamed result lines, two
processes sharing one batch. Each scenario: the ledger total equals the server's bill (the
server prices the lines it completed by its own token count and reports the cost), never above
the cap, no traceback, every odd event named in the log.

``python -m src.run model=gpt41 strategy=D`` on nine sentences (tests/helpers/resumable_run.py),
the Batch API served by tests/helpers/batch_server.py on 127.0.0.1, in this process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from src.billing.ledger import Budget, read_ledger, reserve, spent
from src.data.schema import write_records
from tests.helpers.batch_server import BatchServer
from tests.helpers.paths import REPO_ROOT
from tests.helpers.resumable_run import WORDS, answer, records
from tests.helpers.signals import ctrl_c_as_in_a_terminal

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
N = len(WORDS)
CAP = 0.05  # USD: holds one run's plan ceiling ($0.031 at the batch price), not two


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    write_records(tmp_path / "prepared" / "timex" / "base.jsonl", records())
    return tmp_path


def command(workspace: Path, base_url: str, name: str, *extra: str, cap: float = CAP) -> list[str]:
    return [
        sys.executable,
        "-m",
        "src.run",
        "model=gpt41",
        "strategy=D",
        "dimension=base",
        "tasks=[timex]",
        f"model.options.base_url={base_url}",
        "model.options.mode=batch",
        "model.options.batch_poll_s=0.05",
        "model.options.backoff_base_s=0.01",
        "model.options.backoff_max_s=0.02",
        f"paths.prepared={workspace / 'prepared'}",
        f"paths.cache={workspace / 'cache'}",
        f"mlflow.tracking_uri=sqlite:///{workspace / 'mlflow.db'}",
        f"summary={workspace / name / 'summary.json'}",
        f"hydra.run.dir={workspace / name / 'outputs'}",
        "scoring.bootstrap_resamples=20",
        f"budget.max_cost_usd={cap}",
        "budget.ledger=adversarial",
        f"budget.ledger_file={workspace / 'spend.json'}",
        *extra,
    ]


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "OPENROUTER_API_KEY")}


def start(workspace: Path, base_url: str, name: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        command(workspace, base_url, name, *extra),
        cwd=REPO_ROOT,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=ctrl_c_as_in_a_terminal,
    )


def finish(process: subprocess.Popen) -> tuple[int, str]:
    output, _ = process.communicate(timeout=240)
    assert "Traceback" not in output, output[-4000:]
    return process.returncode, output


def server() -> BatchServer:
    # the server's own rule: its token count, 2 and 8 USD per million, half price in a batch, cost reported
    return BatchServer(
        answer=answer,
        polls_to_complete=2,
        price_in_per_token=2e-6,
        price_out_per_token=8e-6,
        batch_report_cost=True,
    )


def ledger(workspace: Path) -> dict:
    return read_ledger(workspace / "spend.json")


def total(workspace: Path) -> float:
    return sum(e["cost_usd"] for e in ledger(workspace)["ledgers"].get("adversarial", []))


def wait_for_polls(batches: BatchServer, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while not (batches.created and sum(batches.polls.values()) >= 2):
        assert time.monotonic() < deadline and process.poll() is None, "the run never polled its batch"
        time.sleep(0.05)


def holds(workspace: Path) -> list[dict]:
    return [r for r in ledger(workspace)["reservations"].get("adversarial", []) if r.get("kind") == "batch"]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGKILL])
def test_a_batch_in_flight_at_an_interruption_stays_reserved_and_the_resume_settles_it(workspace: Path, stop):
    with server() as batches:
        batches.hold()
        first = start(workspace, batches.base_url, "first")
        wait_for_polls(batches, first)
        first.send_signal(stop)
        code, output = finish(first)
        if stop == signal.SIGINT:
            assert code == 130
            assert "left running at the provider (9 requests, not cancelled); its ceiling stays reserved" in output
        else:
            budget = Budget(CAP, None, "adversarial", workspace / "spend.json", 600)
            probe = reserve(budget, "probe", 0.0, 0)  # the dead run's lease is released; its batch is not
            assert any("1 batches in flight stay reserved at their ceiling" in note for note in probe.notes)
            probe.settle({"cost_usd": 0.0, "requests": 0})
        (held,) = holds(workspace)
        assert held["batch_id"] == batches.created[0] and held["cost_usd"] > 0
        assert spent(Budget(CAP, None, "adversarial", workspace / "spend.json", 600))["reserved_cost_usd"] == (
            pytest.approx(held["cost_usd"])
        )
        batches.release()
        code, output = finish(start(workspace, batches.base_url, "resumed"))
        created, lines, billed = list(batches.created), dict(batches.batch_lines), batches.billed_cost
    assert code == 0, output[-4000:]
    assert "resuming" in output and len(created) == 1 and set(lines.values()) == {1}
    assert holds(workspace) == [] and ledger(workspace)["reservations"]["adversarial"] == []
    assert billed > 0 and total(workspace) == pytest.approx(billed, rel=1e-9) and total(workspace) <= CAP
    runs = [e["run"] for e in ledger(workspace)["ledgers"]["adversarial"] if e["run"] != "probe"]
    assert len(runs) == 2  # one entry per run


@pytest.mark.parametrize("dialect", ["openai", "openrouter"])
def test_a_create_accepted_and_answered_502_makes_one_batch(workspace: Path, dialect: str):
    with server() as batches:
        batches.accept_then_fail(1)
        code, output = finish(start(workspace, batches.base_url, "run", f"model.options.batch_api={dialect}"))
        created, lines, billed = list(batches.created), dict(batches.batch_lines), batches.billed_cost
    assert code == 0, output[-4000:]
    assert len(created) == 1 and set(lines.values()) == {1} and len(lines) == N  # found, not created again
    assert total(workspace) == pytest.approx(billed, rel=1e-9) and total(workspace) <= CAP


def test_a_repeated_custom_id_keeps_its_first_answer_and_an_unnamed_line_is_named(workspace: Path):
    with server() as batches:
        batches.odd_output("duplicate", "unnamed")
        code, output = finish(start(workspace, batches.base_url, "run"))
        billed = batches.billed_cost
    assert code == 0, output[-4000:]
    assert "batch: 1 custom_ids answered more than once (the first answer kept)" in output
    assert "batch: 1 result lines without a custom_id" in output
    texts = [json.loads(p.read_text())["text"] for p in (workspace / "cache").glob("??/*.json")]
    assert len(texts) == N and '["disagreeing"]' not in texts
    assert total(workspace) == pytest.approx(billed, rel=1e-9)


def test_two_processes_sharing_a_batch_settle_it_once(workspace: Path):
    with server() as batches:
        batches.hold()
        first = subprocess.Popen(
            command(workspace, batches.base_url, "first", cap=2 * CAP),
            cwd=REPO_ROOT,
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        wait_for_polls(batches, first)
        log = workspace / "second.log"
        with open(log, "w") as sink:
            second = subprocess.Popen(
                command(workspace, batches.base_url, "second", cap=2 * CAP),
                cwd=REPO_ROOT,
                env=env(),
                stdout=sink,
                stderr=sink,
            )
            deadline = time.monotonic() + 120
            while "this run waits" not in log.read_text():  # it adopted the batch the first is collecting
                assert time.monotonic() < deadline and second.poll() is None, log.read_text()[-3000:]
                time.sleep(0.1)
            batches.release()
            code1, out1 = finish(first)
            code2 = second.wait(timeout=240)
        out2 = log.read_text()
        created, lines, billed = list(batches.created), dict(batches.batch_lines), batches.billed_cost
    assert code1 == 0 and code2 == 0 and "Traceback" not in out2, out1[-3000:] + out2[-3000:]
    assert len(created) == 1 and set(lines.values()) == {1}
    assert "collected by another process; its answers are read here, not billed again" in out2
    assert total(workspace) == pytest.approx(billed, rel=1e-9) and total(workspace) <= 2 * CAP
    entries = ledger(workspace)["ledgers"]["adversarial"]
    assert len(entries) == 2 and holds(workspace) == []
    assert sorted(e["cost_usd"] == 0 for e in entries) == [False, True]  # the batch settled by one run only


@pytest.mark.parametrize("framing", [{"bom": True}, {"separator": True}, {"bom": True, "separator": True}])
def test_output_files_the_json_lines_format_allows_are_read_whole_and_bought_once(workspace: Path, framing: dict):
    """Issue 48: a byte-order mark first, a U+2028 inside every line: each answer was read as missing,
    settled as unbilled and bought again (three servings per request)."""
    with server() as batches:
        batches.frame_output(**framing)
        code, output = finish(start(workspace, batches.base_url, "run"))
        billed, lines = batches.billed_cost, dict(batches.batch_lines)
        responses = batches.billed["responses"]
    assert code == 0, output[-4000:]
    assert set(lines.values()) == {1} and len(lines) == N and responses == N  # each bought once
    assert "unreadable" not in output and "synchronously" not in output
    assert total(workspace) == pytest.approx(billed, rel=1e-9)


def test_answers_billed_and_left_out_of_the_output_are_counted_before_they_are_bought_again(workspace: Path):
    """Issue 48: 3 lines billed (``request_counts.completed``) and missing from every output file were
    settled as unbilled: the ledger said less than the provider billed."""
    with server() as batches:
        batches.frame_output(drop=3)
        code, output = finish(start(workspace, batches.base_url, "run"))
        billed = batches.billed_cost
    assert code == 0, output[-4000:]
    assert "3 billed answers are missing; they are counted as billed (estimated) and bought again" in output
    assert total(workspace) >= billed - 1e-12  # estimates at the admitted bound: never below the bill
    assert total(workspace) <= CAP


def test_a_burst_of_429_on_polls_waits_the_retry_after_and_the_run_ends_well(workspace: Path):
    """Issue 48: 8 polls answered 429 with Retry-After: 1 failed the run after 7 polls in 63 s."""
    with server() as batches:
        batches.throttle_polls(8, "0.2")
        started = time.monotonic()
        code, output = finish(start(workspace, batches.base_url, "run"))
        took, billed = time.monotonic() - started, batches.billed_cost
    assert code == 0, output[-4000:]
    assert took < 60  # waits the server's 0.2 s eight times, not the backoff
    assert total(workspace) == pytest.approx(billed, rel=1e-9) and "synchronously" not in output


def test_results_pages_that_never_end_fail_the_batch_loudly_instead_of_looping(workspace: Path):
    """Issue 48: a results page that repeats its cursor looped forever holding the collect lock."""
    with server() as batches:
        batches.stick_cursor()
        process = start(workspace, batches.base_url, "run", "model.options.batch_api=openrouter")
        code, output = finish(process)
    assert code != 0
    assert "the results of batch" in output and "repeat their cursor after 2 pages" in output


def test_a_batch_the_provider_no_longer_knows_releases_its_hold_and_its_requests_are_bought_once(workspace: Path):
    """Issue 48: a 404 on a batch's poll failed the run and left the batch's hold in the ledger for
    good; the batch bills nothing more, so its hold is released and its requests go to a new batch."""
    with server() as batches:
        batches.forget_next()
        code, output = finish(start(workspace, batches.base_url, "run"))
        created, forgotten, billed = list(batches.created), list(batches.forgotten), batches.billed_cost
        responses = batches.billed["responses"]
    assert code == 0, output[-4000:]
    assert len(created) == 2 and forgotten == created[:1] and responses == N
    assert f"batch {forgotten[0]}: the provider does not know this batch" in output
    assert holds(workspace) == [] and ledger(workspace)["reservations"]["adversarial"] == []
    assert total(workspace) == pytest.approx(billed, rel=1e-9) and total(workspace) <= CAP
