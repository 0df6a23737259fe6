"""A reservation is a lease: its owner renews it and checks it at every admission. A run paused
past ``stale_after_s`` and released by another run stops with one line and keeps one ledger entry
that equals what it was billed; a container with the same host name but its own pids is not
taken for this host; a journal unreadable from here is no reason to release a live lease."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from src.billing.lease import boot_id, pid_namespace, release_stale, stale_reason
from src.billing.ledger import Budget, read_ledger, reserve, spent

ROOT = Path(__file__).resolve().parents[2]

# A run that admits attempts through the real meter, each billed $0.01 by its own "provider" (a
# counter here, not the meter's price): it prints how many attempts it was billed, its lease id,
# and the meter's stop line.
PAUSED_CHILD = """
import sys, time
from pathlib import Path
from src.core.requests import ChatRequest
from src.billing.bill import BilledReply
from src.billing.ledger import Budget, reserve
from src.billing.meter import Meter
from src.billing.prices import Price
budget = Budget(max_cost_usd=100.0, ledger="s", ledger_file=Path(sys.argv[1]), stale_after_s=float(sys.argv[2]))
reservation = reserve(budget, "paused-run", 1.0, 10)
meter = Meter(Price(1.0, 1.0), reservation=reservation)
request = ChatRequest(messages=(("user", "hi"),), max_tokens=4)
billed = 0
print("lease", reservation.id, flush=True)
while True:
    admission = meter.admit(request, True)
    if admission is None:
        break
    time.sleep(0.02)
    billed += 1  # the provider bills the attempt
    meter.settle(admission, BilledReply({"prompt_tokens": 1, "completion_tokens": 1, "cost": 0.01}))
    time.sleep(0.02)
print("stop", meter.exhausted(request), flush=True)
for note in reservation.settle(meter.spend()):
    print("note", note, flush=True)
print("billed", billed, flush=True)
"""


def test_a_paused_run_released_by_another_stops_with_one_line_and_one_entry(tmp_path: Path):
    ledger, stale_after = tmp_path / "spend.json", 1.5
    child = subprocess.Popen(
        [sys.executable, "-c", PAUSED_CHILD, str(ledger), str(stale_after)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lease = child.stdout.readline().split()[1]
    time.sleep(0.6)  # it spends
    _stop_outside_the_lock(child.pid, ledger)  # Ctrl-Z, a SLURM suspend, a laptop asleep
    time.sleep(stale_after + 0.8)
    budget = Budget(max_cost_usd=100.0, ledger="s", ledger_file=ledger, stale_after_s=stale_after)
    second = reserve(budget, "second-run", 0.5, 1)
    assert any("released the stale reservation of paused-run (no heartbeat" in n for n in second.notes)
    released_at = read_ledger(ledger)["ledgers"]["s"][0]["cost_usd"]
    os.kill(child.pid, signal.SIGCONT)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0 and "Traceback" not in err, err
    stops = [line for line in out.splitlines() if line.startswith("stop ")]
    assert len(stops) == 1 and "reservation in ledger 's' was released by another run (no heartbeat" in stops[0]
    billed = int(out.split("billed ")[1])
    second.settle({"cost_usd": 0.25, "requests": 1})
    entries = read_ledger(ledger)["ledgers"]["s"]
    assert sorted(e["run"] for e in entries) == ["paused-run", "second-run"]  # one entry each
    mine = next(e for e in entries if e["run"] == "paused-run")
    assert mine["lease"] == lease and mine["cost_usd"] == pytest.approx(0.01 * billed)  # = what it was billed
    assert released_at <= mine["cost_usd"] and "stale" in mine
    assert spent(budget)["cost_usd"] == pytest.approx(0.01 * billed + 0.25)
    assert read_ledger(ledger)["reservations"]["s"] == []


def _stop_outside_the_lock(pid: int, ledger: Path) -> None:
    """SIGSTOP ``pid`` at a moment it does not hold the ledger's lock (it checks its lease under it)."""
    with open(ledger.with_name(ledger.name + ".lock"), "a") as handle:
        for _ in range(100):
            os.kill(pid, signal.SIGSTOP)
            while Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "T":
                time.sleep(0.001)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.kill(pid, signal.SIGCONT)
                time.sleep(0.01)
                continue
            fcntl.flock(handle, fcntl.LOCK_UN)
            return
    raise AssertionError("the child always held the ledger's lock")


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_same_host_name_in_another_pid_namespace_is_judged_by_the_heartbeat_only(tmp_path: Path):
    journal = tmp_path / "j.jsonl"
    journal.write_text("")
    here = {"host": socket.gethostname(), "boot_id": boot_id(), "pid_ns": pid_namespace()}
    lease = {**here, "pid": _dead_pid(), "journal": str(journal), "started": time.time(), "run": "r"}
    assert "is gone" in stale_reason(lease, 600)  # this namespace: its pid is gone
    other = {**lease, "pid_ns": "pid:[4026599999]"}  # a container with the same host name
    assert stale_reason(other, 600) is None  # its pid means nothing here; its heartbeat is fresh
    assert stale_reason({**lease, "pid_ns": ""}, 600) is None  # cannot tell: heartbeat rule only
    old = time.time() - 700
    os.utime(journal, (old, old))
    assert "no heartbeat for 70" in stale_reason({**other, "started": old}, 600)  # this machine's clock


def test_an_unreadable_journal_does_not_release_a_renewed_lease(tmp_path: Path):
    ledger = tmp_path / "spend.json"
    budget = Budget(max_cost_usd=1.0, ledger="s", ledger_file=ledger, stale_after_s=5)
    first = reserve(budget, "a", 0.5, 1)
    first.journal.unlink()  # another machine cannot stat it (here: gone)
    time.sleep(0.2)
    first.renew()  # the heartbeat renews the lease in the ledger itself
    data = read_ledger(ledger)
    lease = data["reservations"]["s"][0]
    assert stale_reason(lease, 5) is None
    far_host = {**lease, "host": "elsewhere", "journal": "/nonexistent/dir/j.jsonl"}
    assert stale_reason(far_host, 5) is None  # the first look from here starts the watch
    assert stale_reason(far_host, 5, now=time.time() + 4) is None
    assert "no heartbeat seen from here for" in stale_reason(far_host, 5, now=time.time() + 60)
    second = reserve(budget, "b", 0.5, 1)
    assert second.notes == [] and first.check() is None
    first.settle({"cost_usd": 0.1, "requests": 1})
    second.settle({"cost_usd": 0.2, "requests": 1})
    assert spent(budget)["cost_usd"] == pytest.approx(0.3) and spent(budget)["runs"] == 2


def test_a_batch_in_flight_stays_held_at_its_ceiling_until_a_run_collects_it(tmp_path: Path):
    ledger = tmp_path / "spend.json"
    budget = Budget(max_cost_usd=1.0, ledger="s", ledger_file=ledger, stale_after_s=600)
    first = reserve(budget, "a", 0.6, 10)
    first.hold_batch("k1", "batch-1", 0.4)
    first.settle({"cost_usd": 0.1, "requests": 10})  # Ctrl-C with the batch in flight
    holds = read_ledger(ledger)["reservations"]["s"]
    assert [(h["kind"], h["batch_id"], h["cost_usd"]) for h in holds] == [("batch", "batch-1", 0.4)]
    assert release_stale(read_ledger(ledger), "s", 0.0) == []  # no rule releases a hold
    with pytest.raises(Exception, match=r"\$0.4 reserved by runs in progress"):
        reserve(budget, "b", 0.6, 1)  # 0.1 + 0.4 + 0.6 > 1
    resumed = reserve(budget, "b", 0.1, 1)
    assert resumed.take_batch("k1") == "held" and resumed.cost_usd == pytest.approx(0.5)
    assert read_ledger(ledger)["reservations"]["s"][0]["batches"] == {"k1": {"batch_id": "batch-1", "cost_usd": 0.4}}
    resumed.collected_batch("k1")
    resumed.settle({"cost_usd": 0.3, "requests": 0})
    assert read_ledger(ledger)["reservations"]["s"] == []
    assert spent(budget)["cost_usd"] == pytest.approx(0.4)


def test_a_killed_runs_batches_become_holds_not_a_release(tmp_path: Path):
    ledger = tmp_path / "spend.json"
    budget = Budget(max_cost_usd=1.0, ledger="s", ledger_file=ledger, stale_after_s=600)
    first = reserve(budget, "a", 0.6, 10)
    first.record(0.05, 1, 1)
    first.hold_batch("k1", "batch-1", 0.4)
    first._stop.set()
    data = read_ledger(ledger)
    data["reservations"]["s"][0]["pid"] = _dead_pid()  # as if SIGKILLed
    notes = release_stale(data, "s", 600)
    assert "1 batches in flight stay reserved at their ceiling" in notes[0]
    assert [e["cost_usd"] for e in data["ledgers"]["s"]] == [0.05]
    assert [(h["kind"], h["cost_usd"]) for h in data["reservations"]["s"]] == [("batch", 0.4)]


def test_a_lease_from_another_clock_is_judged_by_what_this_machine_saw_never_by_its_stamps(tmp_path: Path):
    """Issue 48: a lease was stale when its owner's ``renewed`` stamp was older than this machine's
    clock by ``stale_after_s``: an owner whose clock runs 10 minutes behind looked dead while it
    renewed every 30 s. Its stamps are now only compared with themselves."""
    journal = tmp_path / "j.jsonl"
    journal.write_text("")
    behind = time.time() - 600  # the owner's clock, 10 minutes behind this one
    lease = {"host": "elsewhere", "boot_id": "b", "pid": 1, "journal": "/not/here.jsonl", "run": "r",
             "started": behind, "renewed": behind}  # fmt: skip
    now = time.time()
    assert stale_reason(lease, 60, now=now) is None
    for beat in range(1, 6):  # it renews every 30 s of its own clock: never stale, whatever its stamps say
        lease["renewed"] = behind + 30 * beat
        assert stale_reason(lease, 60, now=now + 30 * beat) is None
    assert stale_reason(lease, 60, now=now + 150 + 59) is None  # then it stops renewing
    assert "no heartbeat seen from here for 61 s" in stale_reason(lease, 60, now=now + 150 + 61)
    ahead = {**lease, "seen": {}, "renewed": time.time() + 3600}  # a clock an hour ahead: no free pass either
    assert stale_reason(ahead, 60, now=now) is None
    assert "no heartbeat seen from here" in stale_reason(ahead, 60, now=now + 61)
