"""The ledger's reservations: a cap that holds when runs start at once, settle to what was spent,
and a dead run's reservation released by the stated rule at the sum of its journal."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from src.billing.lease import boot_id, stale_reason
from src.billing.ledger import Budget, read_ledger, reserve, spent
from src.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def _race(path: str, name: str, start: float, ceiling: float, queue) -> None:
    """One of N processes reserving at the same moment: report whether it got its reservation."""
    budget = Budget(max_cost_usd=1.0, ledger="sweep", ledger_file=Path(path), stale_after_s=600)
    while time.time() < start:
        time.sleep(0.001)
    try:
        reservation = reserve(budget, name, ceiling, 10)
    except ConfigError as error:
        queue.put((name, False, str(error)))
        return
    time.sleep(0.3)  # hold the reservation while the others check
    reservation.settle({"cost_usd": ceiling * 0.8, "requests": 10})
    queue.put((name, True, ""))


@pytest.mark.parametrize("processes", [2, 4])
def test_runs_that_start_at_once_never_reserve_more_than_the_cap(tmp_path: Path, processes: int):
    ledger = tmp_path / "spend.json"
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    start = time.time() + 1.5
    ceiling = 0.4  # the cap of $1 holds two such runs, not three
    workers = [
        context.Process(target=_race, args=(str(ledger), f"run{n}", start, ceiling, queue)) for n in range(processes)
    ]
    for worker in workers:
        worker.start()
    outcomes = [queue.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    admitted = [name for name, ok, _ in outcomes if ok]
    assert len(admitted) == min(processes, 2)
    refused = [why for _, ok, why in outcomes if not ok]
    assert all("would cost $0.4 (10 requests) at most" in why for why in refused)
    data = read_ledger(ledger)
    assert data["reservations"]["sweep"] == []
    assert sum(e["cost_usd"] for e in data["ledgers"]["sweep"]) == pytest.approx(0.32 * len(admitted))


def test_a_reservation_counts_until_settled_and_extends_only_within_the_cap(tmp_path: Path):
    budget = Budget(
        max_cost_usd=1.0, max_requests=30, ledger="s", ledger_file=tmp_path / "spend.json", stale_after_s=600
    )
    first = reserve(budget, "a", 0.5, 10)
    assert spent(budget)["reserved_cost_usd"] == 0.5 and spent(budget)["reserved_requests"] == 10
    with pytest.raises(ConfigError, match=r"\$0.5 reserved by runs in progress"):
        reserve(budget, "b", 0.6, 5)
    second = reserve(budget, "b", 0.4, 5)
    assert first.extend(0.5, 10, 0.1, 1)  # 0.6 + 0.4 = the cap
    assert not first.extend(0.6, 11, 0.05, 0)  # 0.65 + 0.4 > 1
    second.settle({"cost_usd": 0.1, "requests": 4})
    assert first.extend(0.6, 11, 0.25, 0)  # b settled at 0.1: room again
    first.settle({"cost_usd": 0.7, "requests": 12})
    assert spent(budget) == {
        "cost_usd": pytest.approx(0.8),
        "requests": 16,
        "runs": 2,
        "reserved_cost_usd": 0.0,
        "reserved_requests": 0,
    }


def test_without_a_ledger_a_run_is_capped_on_its_own_and_writes_nothing(tmp_path: Path):
    budget = Budget(max_cost_usd=1.0, ledger_file=tmp_path / "spend.json")
    reservation = reserve(budget, "a", 0.4, 10)
    assert reservation.allowance() == (1.0, None)  # the whole cap is its own
    assert not reservation.extend(0.9, 0, 0.2, 0)
    reservation.settle({"cost_usd": 0.3})
    assert not (tmp_path / "spend.json").exists()


CHILD = """
import sys, time
from pathlib import Path
from src.billing.ledger import Budget, reserve
reservation = reserve(Budget(max_cost_usd=5.0, ledger="s", ledger_file=Path(sys.argv[1]), stale_after_s=600), "killed-run", 2.0, 40)
for n in range(3):
    reservation.record(0.25, 1, 1)
print("reserved", flush=True)
time.sleep(120)
"""


def test_a_killed_runs_reservation_is_released_at_its_journal_by_the_next_run(tmp_path: Path):
    ledger = tmp_path / "spend.json"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(ledger)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "reserved"
    budget = Budget(max_cost_usd=5.0, ledger="s", ledger_file=ledger, stale_after_s=600)
    live = read_ledger(ledger)["reservations"]["s"]
    assert [r["run"] for r in live] == ["killed-run"] and stale_reason(live[0], 600) is None
    with pytest.raises(ConfigError, match=r"\$2.00 reserved by runs in progress"):
        reserve(budget, "next", 3.5, 1)  # the live run's $2 still counts
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    assert "is gone" in stale_reason(live[0], 600)
    reservation = reserve(budget, "next", 3.5, 1)  # released: 0.75 settled + 3.5 fits the $5 cap
    assert any("released the stale reservation of killed-run" in note for note in reservation.notes)
    entries = read_ledger(ledger)["ledgers"]["s"]
    assert [(e["run"], e["cost_usd"], e["requests"], "is gone" in e["stale"]) for e in entries] == [
        ("killed-run", 0.75, 3, True)
    ]
    assert not Path(live[0]["journal"]).exists()
    reservation.settle({"cost_usd": 0.0, "requests": 0})


def test_a_reservation_without_a_heartbeat_is_stale_on_any_host(tmp_path: Path):
    journal = tmp_path / "j.jsonl"
    journal.write_text(json.dumps({"cost_usd": 1.0, "requests": 1, "attempts": 1}) + "\n")
    old = time.time() - 700
    os.utime(journal, (old, old))
    other_host = {"host": "elsewhere", "pid": 1, "journal": str(journal), "started": old, "run": "r"}
    assert stale_reason(other_host, 600) is None  # another clock: the first look starts the watch
    assert stale_reason(other_host, 600, now=time.time() + 500) is None
    assert "no heartbeat seen from here for 70" in stale_reason(other_host, 600, now=time.time() + 701)
    here = {**other_host, "host": socket.gethostname(), "boot_id": boot_id()}  # this clock: its stamps count
    assert "no heartbeat for 70" in stale_reason(here, 600)
    assert stale_reason(here, 800) is None
