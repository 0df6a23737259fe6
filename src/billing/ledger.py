"""The spend ledger runs share, and the reservation that makes a cap hold under parallel runs.

A ledger (``budget.ledger``, a name; the file ``budget.ledger_file``) holds, per name, the
settled spend of finished runs (``ledgers``) and the *reservations* of runs in progress
(``reservations``). Before its first request a run reserves its planned ceiling under an
exclusive file lock: the check "settled + every live reservation + this ceiling <= cap" and
the reservation are one step, so N runs started at once can never together pass the cap. A
run that needs more than it reserved (retries, a low token estimate) extends its reservation
under the same lock, or stops. At its end (finished, failed, Ctrl-C, SIGTERM) it settles: the
reservation becomes an entry holding what it really spent.

Every billed attempt is also appended to the run's *journal* (one JSON line each, beside the
ledger), and a heartbeat touches the journal every :data:`HEARTBEAT_S` seconds. A run that
died without settling (SIGKILL, a lost machine) leaves a stale reservation, released by the
next run that opens the ledger, by this rule:

* on the same host, when its process is gone (the pid is not running, or runs another program
  started later: pid reuse is checked by the process start time);
* on any host, when its journal has had no heartbeat for ``budget.stale_after_s`` seconds.

A released reservation is settled at the sum of its journal: what the dead run was billed
(docs/cost.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from src.config.errors import ConfigError

LEDGER_FORMAT = 2
HEARTBEAT_S = 30.0


@dataclass(frozen=True)
class Budget:
    """``budget.*`` (conf/config.yaml): caps on new cost and new requests (None: no cap), and the
    ledger runs share with its file and stale rule (needed only with a ledger)."""

    max_cost_usd: float | None = None
    max_requests: int | None = None
    ledger: str | None = None
    ledger_file: Path | None = None
    stale_after_s: float | None = None

    def __post_init__(self) -> None:
        if self.ledger is not None and (self.ledger_file is None or self.stale_after_s is None):
            raise ValueError("a budget with a ledger needs its ledger_file and stale_after_s")

    @property
    def capped(self) -> bool:
        return self.max_cost_usd is not None or self.max_requests is not None


def read_ledger(path: Path) -> dict[str, Any]:
    """The ledger file's content (empty when absent); a file that is not a ledger is a ConfigError."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"format": LEDGER_FORMAT, "ledgers": {}, "reservations": {}}
    except (OSError, ValueError) as error:
        raise ConfigError(f"budget.ledger_file: {path} is not a spend ledger ({error}); move it away") from None
    if not isinstance(data, dict) or not isinstance(data.get("ledgers"), dict):
        raise ConfigError(f"budget.ledger_file: {path} is not a spend ledger (no 'ledgers' object); move it away")
    data.setdefault("reservations", {})
    data["format"] = LEDGER_FORMAT
    return data


def _write_ledger(path: Path, data: dict[str, Any]) -> None:
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(temp, path)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock beside the ledger: every read-check-write of it happens under this."""

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _settled(entries: list[dict]) -> dict[str, float]:
    return {
        "cost_usd": float(sum(e.get("cost_usd", 0.0) for e in entries)),
        "requests": int(sum(e.get("requests", 0) for e in entries)),
        "runs": len(entries),
    }


def spent(budget: Budget) -> dict[str, float]:
    """What ``budget.ledger`` holds: settled cost, requests and runs, and what live runs reserved."""
    if budget.ledger is None:
        return {"cost_usd": 0.0, "requests": 0, "runs": 0, "reserved_cost_usd": 0.0, "reserved_requests": 0}
    data = read_ledger(budget.ledger_file)
    live = data["reservations"].get(budget.ledger, [])
    return {
        **_settled(data["ledgers"].get(budget.ledger, [])),
        "reserved_cost_usd": float(sum(r["cost_usd"] for r in live)),
        "reserved_requests": int(sum(r["requests"] for r in live)),
    }


# ----- process identity and staleness ---------------------------------------------------------------


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_start(pid: int) -> str | None:
    """The boot and start time of process ``pid`` (None where /proc cannot tell): with the pid,
    it names one process even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return f"{_boot_id()}:{stat.rpartition(')')[2].split()[19]}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_reason(reservation: dict[str, Any], stale_after_s: float, now: float | None = None) -> str | None:
    """Why a reservation is stale (its run is gone), or None while its run may still be going."""
    now = time.time() if now is None else now
    if reservation.get("host") == socket.gethostname():
        pid = int(reservation.get("pid", -1))
        if not _alive(pid):
            return f"process {pid} is gone"
        started = reservation.get("process_start")
        if started is not None and process_start(pid) not in (None, started):
            return f"process {pid} is another program now"
    journal = Path(reservation.get("journal", ""))
    try:
        beat = journal.stat().st_mtime
    except OSError:
        beat = float(reservation.get("started", 0.0))
    if now - beat > stale_after_s:
        return f"no heartbeat for {now - beat:.0f} s (budget.stale_after_s={stale_after_s:g})"
    return None


def journal_total(path: Path) -> dict[str, float]:
    """The cost, requests and attempts a journal recorded (a torn last line is skipped)."""
    total = {"cost_usd": 0.0, "requests": 0, "attempts": 0}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return total
    for line in lines:
        try:
            item = json.loads(line)
        except ValueError:
            continue
        total["cost_usd"] += float(item.get("cost_usd", 0.0))
        total["requests"] += int(item.get("requests", 0))
        total["attempts"] += int(item.get("attempts", 0))
    return total


def release_stale(data: dict[str, Any], name: str, stale_after_s: float) -> list[str]:
    """Settle the stale reservations of ledger ``name`` in ``data`` at their journals' sums; the
    lines to log."""
    kept, notes = [], []
    for reservation in data["reservations"].get(name, []):
        why = stale_reason(reservation, stale_after_s)
        if why is None:
            kept.append(reservation)
            continue
        journal = Path(reservation["journal"])
        total = journal_total(journal)
        data["ledgers"].setdefault(name, []).append({"run": reservation["run"], "time": _now(), "stale": why, **total})
        journal.unlink(missing_ok=True)
        notes.append(
            f"ledger {name!r}: released the stale reservation of {reservation['run']} ({why}); "
            f"settled at its journal: ${total['cost_usd']:.6g}, {total['requests']} requests"
        )
    data["reservations"][name] = kept
    return notes


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


# ----- the reservation ------------------------------------------------------------------------------


class Reservation:
    """A run's claim on its ledger: reserved cost and requests, its journal and heartbeat.

    Without a ledger name the reservation lives in memory only and its allowance is the cap
    itself (each run capped on its own).
    """

    def __init__(self, budget: Budget, run_name: str, cost_usd: float, requests: int) -> None:
        self.budget = budget
        self.run_name = run_name
        self.id = uuid.uuid4().hex[:12]
        self.cost_usd = cost_usd  # reserved
        self.requests = requests
        self.journal: Path | None = None
        self._handle = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self.notes: list[str] = []

    @property
    def shared(self) -> bool:
        return self.budget.ledger is not None

    def allowance(self) -> tuple[float | None, int | None]:
        """(cost, requests) this run may spend now (None: no cap)."""
        cost = None if self.budget.max_cost_usd is None else self.cost_usd
        requests = None if self.budget.max_requests is None else self.requests
        return cost, requests

    def record(self, cost_usd: float, requests: int, attempts: int) -> None:
        """Append one attempt to the journal (what a stale release settles at)."""
        if self._handle is not None:
            line = json.dumps({"cost_usd": cost_usd, "requests": requests, "attempts": attempts})
            self._handle.write(line + "\n")
            self._handle.flush()

    def extend(self, spent_cost: float, spent_requests: int, cost: float, requests: int) -> bool:
        """Grow the reservation to ``spent + needed`` if the cap allows it (under the lock)."""
        want_cost = max(self.cost_usd, spent_cost + cost)
        want_requests = max(self.requests, spent_requests + requests)
        if not self.shared:
            if not _fits(self.budget, 0.0, 0, want_cost, want_requests):
                return False
            self.cost_usd, self.requests = want_cost, want_requests
            return True
        path, name = self.budget.ledger_file, self.budget.ledger
        with locked(path):
            data = read_ledger(path)
            self.notes += release_stale(data, name, self.budget.stale_after_s)
            others = [r for r in data["reservations"].get(name, []) if r["id"] != self.id]
            settled = _settled(data["ledgers"].get(name, []))
            held_cost = settled["cost_usd"] + sum(r["cost_usd"] for r in others)
            held_requests = settled["requests"] + sum(r["requests"] for r in others)
            if not _fits(self.budget, held_cost, held_requests, want_cost, want_requests):
                return False
            for reservation in data["reservations"].get(name, []):
                if reservation["id"] == self.id:
                    reservation.update(cost_usd=want_cost, requests=want_requests)
            _write_ledger(path, data)
        self.cost_usd, self.requests = want_cost, want_requests
        return True

    def settle(self, spend: dict[str, float]) -> None:
        """Replace the reservation by an entry of what the run spent; stop the heartbeat."""
        self._stop.set()
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        if not self.shared:
            return
        path, name = self.budget.ledger_file, self.budget.ledger
        with locked(path):
            data = read_ledger(path)
            data["reservations"][name] = [r for r in data["reservations"].get(name, []) if r["id"] != self.id]
            data["ledgers"].setdefault(name, []).append({"run": self.run_name, "time": _now(), **spend})
            _write_ledger(path, data)
        if self.journal is not None:
            self.journal.unlink(missing_ok=True)

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with contextlib.suppress(OSError):
                os.utime(self.journal)


def _fits(budget: Budget, held_cost: float, held_requests: int, cost: float, requests: int) -> bool:
    if budget.max_cost_usd is not None and held_cost + cost > budget.max_cost_usd + 1e-12:
        return False
    return budget.max_requests is None or held_requests + requests <= budget.max_requests


def reserve(budget: Budget, run_name: str, ceiling_cost: float | None, to_send: int) -> Reservation:
    """Reserve a run's planned ceiling (``ceiling_cost`` None: no price, counted as 0 where no cost
    cap is set), or raise ConfigError with the budget line when it does not fit."""
    cost = ceiling_cost or 0.0
    reservation = Reservation(budget, run_name, cost, to_send)
    if budget.ledger is None:
        problem = budget_problem(budget, run_name, ceiling_cost, to_send, _settled([]), 0.0, 0)
        if problem:
            raise ConfigError(problem)
        if budget.max_cost_usd is not None:  # a run on its own may use its whole cap
            reservation.cost_usd = budget.max_cost_usd
        if budget.max_requests is not None:
            reservation.requests = budget.max_requests
        return reservation
    path, name = budget.ledger_file, budget.ledger
    with locked(path):
        data = read_ledger(path)
        reservation.notes += release_stale(data, name, budget.stale_after_s)
        live = data["reservations"].get(name, [])
        settled = _settled(data["ledgers"].get(name, []))
        problem = budget_problem(
            budget,
            run_name,
            ceiling_cost,
            to_send,
            settled,
            sum(r["cost_usd"] for r in live),
            sum(r["requests"] for r in live),
        )
        if problem:
            _write_ledger(path, data)  # the stale releases stand
            raise ConfigError(problem)
        journal = path.parent / "spend-journals" / f"{name.replace('/', '_')}-{reservation.id}.jsonl"
        journal.parent.mkdir(parents=True, exist_ok=True)
        reservation.journal = journal
        reservation._handle = open(journal, "a", encoding="utf-8")  # noqa: SIM115 - closed by settle
        live.append(
            {
                "id": reservation.id,
                "run": run_name,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "process_start": process_start(os.getpid()),
                "started": time.time(),
                "cost_usd": cost,
                "requests": to_send,
                "journal": str(journal),
            }
        )
        data["reservations"][name] = live
        _write_ledger(path, data)
    reservation._beat = threading.Thread(target=reservation._heartbeat, name="ledger-heartbeat", daemon=True)
    reservation._beat.start()
    return reservation


def usd(value: float) -> str:
    """Dollars readable at any scale: cents from $1 up, else up to six decimals (``$0.00013``)."""
    if abs(value) >= 1:
        return f"${value:,.2f}"
    short = f"{value:.6f}".rstrip("0").rstrip(".")
    return f"${short}" if short not in ("0", "-0") or value == 0 else f"${value:.3g}"


def budget_problem(
    budget: Budget,
    configuration: str,
    ceiling: float | None,
    to_send: int,
    settled: dict[str, float],
    reserved_cost: float,
    reserved_requests: int,
) -> str | None:
    """Why a plan does not fit the budget beside what is settled and reserved (one line without
    ``error:``), else None."""
    where = f" (ledger {budget.ledger!r}: {settled['runs']} runs settled)" if budget.ledger else ""
    held_requests = int(settled["requests"]) + int(reserved_requests)
    reserved = f", {int(reserved_requests)} reserved by runs in progress" if reserved_requests else ""
    if budget.max_requests is not None and held_requests + to_send > budget.max_requests:
        left = max(0, budget.max_requests - held_requests)
        return (
            f"budget: {configuration} would send {to_send} requests; {int(settled['requests'])} sent so far"
            f"{reserved}{where}, {left} remain of budget.max_requests={budget.max_requests}"
        )
    if budget.max_cost_usd is None or to_send == 0:
        return None
    if ceiling is None:
        return (
            f"budget: {configuration} would send {to_send} requests to a model without a price "
            "(add a price block to its model file) and budget.max_cost_usd is set"
        )
    held = settled["cost_usd"] + reserved_cost
    if held + ceiling > budget.max_cost_usd + 1e-12:
        left = max(0.0, budget.max_cost_usd - held)
        in_progress = f", {usd(reserved_cost)} reserved by runs in progress" if reserved_cost else ""
        return (
            f"budget: {configuration} would cost {usd(ceiling)} ({to_send} requests) at most; "
            f"{usd(settled['cost_usd'])} spent so far{in_progress}{where}, {usd(left)} remain of "
            f"budget.max_cost_usd={budget.max_cost_usd:g}"
        )
    return None
