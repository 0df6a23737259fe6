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
ledger). A reservation is a *lease* the run renews (a heartbeat) and checks at every admission:
:mod:`src.billing.lease` says when another run may release it (its run is gone), settled at
the sum of its journal; a run that finds its lease released stops sending and settles only
what the release did not count, so each run has exactly one entry (docs/cost.md). An ended
run's journal is kept (*carried*) for its next process, whose usage counts those attempts at
their price (:mod:`src.billing.earlier`); a run without a shared ledger keeps a journal too.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from src.billing.lease import HEARTBEAT_S, batch_holds, carry_journal, identity, now_stamp, release_stale
from src.core.errors import ConfigError
from src.durable import replace_durably

LEDGER_FORMAT = 2


@dataclass(frozen=True)
class Budget:
    """``budget.*`` (conf/config.yaml): caps on new cost and new requests (None: no cap), and the
    ledger runs share with its file and stale rule (needed only with a ledger)."""

    max_cost_usd: float | None = None
    max_requests: int | None = None
    ledger: str | None = None
    ledger_file: Path | None = None
    stale_after_s: float | None = None
    #: days a model file's price stays fresh (None: not checked, as for a budget built in code)
    price_max_age_days: int | None = None
    #: the sweep profile the caps were read from (the pipeline's run@ stages), if any
    sweep_file: Path | None = None

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
    replace_durably(path, json.dumps(data, indent=1, sort_keys=True))


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock beside the ledger: every read-check-write of it happens under this."""

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(path.with_name(path.name + ".lock"), preserve_lock_file=True):
        yield


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


# ----- the reservation ------------------------------------------------------------------------------


class Reservation:
    """A run's claim on its ledger, a lease (:mod:`src.billing.lease`): reserved cost and requests,
    its journal and heartbeat. The run checks its lease at every admission (:meth:`check`); one
    released by another process (the run was paused past ``stale_after_s``) stops the run with
    :attr:`lost`, and its settle adds only what the release did not count.

    Without a ledger name the reservation lives in memory only and its allowance is the cap
    itself (each run capped on its own).
    """

    def __init__(self, budget: Budget, run_name: str, cost_usd: float, requests: int, scope: str | None = None) -> None:
        self.budget = budget
        self.run_name = run_name
        self.scope = scope or run_name  # whose carried journals these are (a run's key: src/billing/earlier.py)
        self.id = uuid.uuid4().hex[:12]  # the lease id
        self.cost_usd = cost_usd  # reserved
        self.requests = requests
        self.journal: Path | None = None
        self.lost: str | None = None  # the line a run whose lease was released stops with
        self._handle = None
        self._journal_lock = threading.Lock()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self.notes: list[str] = []
        self.carried: Path | None = None  # where settle kept the journal (src/billing/earlier.py)
        self.room: Path | None = None  # disk space kept for the ledger's last writes (:func:`keep_room`)
        self.unsettled: str | None = None  # the line a settle that could not write the ledger ends with

    @property
    def shared(self) -> bool:
        return self.budget.ledger is not None

    def allowance(self) -> tuple[float | None, int | None]:
        """(cost, requests) this run may spend now (None: no cap)."""
        cost = None if self.budget.max_cost_usd is None else self.cost_usd
        requests = None if self.budget.max_requests is None else self.requests
        return cost, requests

    def record(self, cost_usd: float, requests: int, attempts: int, **detail: object) -> None:
        """Append one attempt to the journal (what a stale release settles at); ``detail``: what a
        resumed run needs to count it (its key, mode, tokens)."""
        with self._journal_lock:
            if self._handle is not None:
                line = json.dumps({"cost_usd": cost_usd, "requests": requests, "attempts": attempts, **detail})
                try:
                    self._handle.write(line + "\n")
                    self._handle.flush()
                    os.fsync(self._handle.fileno())  # what a stale release settles at: on disk before it counts
                except OSError as error:
                    self._journal_failed(error)

    def _journal_failed(self, error: OSError) -> None:
        """The journal cannot grow (a full or read-only disk): the run stops sending; what it spent
        stays counted in memory and is settled into the ledger with the room kept for it."""
        handle, self._handle = self._handle, None
        with contextlib.suppress(OSError):
            handle.close()  # its unwritten line is dropped (a torn last line is skipped when read)
        if self.lost is None:
            self.lost = (
                f"budget: this run's spend journal {self.journal} cannot be written ({error.strerror or error}); "
                "it stops sending now (what it spent is settled in the ledger; free space and rerun the same "
                "command to complete from the cache)"
            )

    # ----- the lease, under the ledger's lock ---------------------------------------------------------

    @contextlib.contextmanager
    def _lease(self, write: bool = True) -> Iterator[tuple[dict, dict | None]]:
        """(the ledger's data, this run's lease in it or None when released), under the lock."""
        path, name = self.budget.ledger_file, self.budget.ledger
        with locked(path):
            data = read_ledger(path)
            mine = next((r for r in data["reservations"].get(name, []) if r.get("id") == self.id), None)
            if mine is None and self.lost is None:
                self.lost = self._lost_line(data)
            yield data, mine
            if write:
                self._write(data)

    def _write(self, data: dict) -> None:
        """Write the ledger; on a full disk, give back the room reserved for this run and try once
        more (so a settle still lands), else raise :class:`LedgerUnwritable` with one line."""
        path = self.budget.ledger_file
        try:
            _write_ledger(path, data)
            return
        except OSError as error:
            if not self._free_room():
                raise LedgerUnwritable(unwritable_line(path, error)) from None
        try:
            _write_ledger(path, data)
        except OSError as error:
            raise LedgerUnwritable(unwritable_line(path, error)) from None

    def _free_room(self) -> bool:
        room, self.room = self.room, None
        if room is None:
            return False
        with contextlib.suppress(OSError):
            room.unlink()
            return True
        return False

    def _lost_line(self, data: dict) -> str:
        entry = self._entry(data)
        why = f" ({entry['stale']})" if entry and entry.get("stale") else ""
        return (
            f"budget: this run's reservation in ledger {self.budget.ledger!r} was released by another run{why}, "
            "e.g. while this process was paused; it stops sending now (what it spent is settled once; "
            "rerun the same command to complete from the cache)"
        )

    def _entry(self, data: dict) -> dict | None:
        return next((e for e in data["ledgers"].get(self.budget.ledger, []) if e.get("lease") == self.id), None)

    def check(self) -> str | None:
        """None while this run's lease is in the ledger, else the one line it stops with."""
        if not self.shared or self.lost is not None:
            return self.lost
        with self._lease(write=False):
            pass
        return self.lost

    def renew(self) -> None:
        """The heartbeat: the lease's renewal time in the ledger and the journal's time."""
        if self.journal is not None:
            with contextlib.suppress(OSError):
                os.utime(self.journal)
        if self.shared and self.lost is None:
            with self._lease() as (_, mine):
                if mine is not None:
                    mine["renewed"] = time.time()

    def extend(self, spent_cost: float, spent_requests: int, cost: float, requests: int) -> bool:
        """Grow the reservation to ``spent + needed`` if the cap allows it (under the lock); never
        for a run that has stopped (:attr:`lost`)."""
        if self.lost is not None:
            return False
        want_cost = max(self.cost_usd, spent_cost + cost)
        want_requests = max(self.requests, spent_requests + requests)
        if not self.shared:
            if not _fits(self.budget, 0.0, 0, want_cost, want_requests):
                return False
            self.cost_usd, self.requests = want_cost, want_requests
            return True
        name = self.budget.ledger
        with self._lease() as (data, mine):
            if mine is None:
                return False
            self.notes += release_stale(data, name, self.budget.stale_after_s, self.id)
            others = [r for r in data["reservations"].get(name, []) if r["id"] != self.id]
            settled = _settled(data["ledgers"].get(name, []))
            held_cost = settled["cost_usd"] + sum(r["cost_usd"] for r in others)
            held_requests = settled["requests"] + sum(r["requests"] for r in others)
            if not _fits(self.budget, held_cost, held_requests, want_cost, want_requests):
                return False
            mine.update(cost_usd=want_cost, requests=want_requests)
        self.cost_usd, self.requests = want_cost, want_requests
        return True

    # ----- batches in flight ----------------------------------------------------------------------------

    def hold_batch(self, key: str, batch_id: str | None, cost_usd: float) -> None:
        """Name a submitted batch and its ceiling in the lease: if the run ends (or dies) before
        collecting it, the ceiling stays reserved as a batch hold."""
        if self.shared:
            with self._lease() as (_, mine):
                if mine is not None:
                    mine.setdefault("batches", {})[key] = {"batch_id": batch_id, "cost_usd": cost_usd}

    def collected_batch(self, key: str) -> None:
        """The batch ``key`` is collected and its lines settled (by this run or another): no lease
        names it and no hold keeps it any more."""
        if self.shared:
            with self._lease() as (data, _):
                live = data["reservations"].get(self.budget.ledger, [])
                for lease in live:
                    (lease.get("batches") or {}).pop(key, None)
                live[:] = [r for r in live if r.get("batch_key") != key]

    def take_batch(self, key: str) -> str:
        """Take over batch ``key`` to collect it: ``"held"`` (its hold's room is now this run's),
        ``"owned"`` (a live run's lease holds it: leave it to that run) or ``"none"`` (no record)."""
        if not self.shared:
            return "none"
        name = self.budget.ledger
        with self._lease() as (data, mine):
            if mine is None:
                return "none"
            self.notes += release_stale(data, name, self.budget.stale_after_s, self.id)
            live = data["reservations"].get(name, [])
            if key in (mine.get("batches") or {}):
                return "held"  # taken over when the run reserved
            if any(key in (r.get("batches") or {}) for r in live if r is not mine):
                return "owned"
            hold = next((r for r in live if r.get("batch_key") == key), None)
            if hold is None:
                return "none"
            live.remove(hold)
            mine["cost_usd"] = self.cost_usd = self.cost_usd + hold["cost_usd"]
            mine.setdefault("batches", {})[key] = {"batch_id": hold.get("batch_id"), "cost_usd": hold["cost_usd"]}
            return "held"

    # ----- the end ----------------------------------------------------------------------------------------

    def settle(self, spend: dict[str, float]) -> list[str]:
        """Replace the lease by one entry of what the run spent (its batches in flight kept as holds);
        a lease already released was settled at its journal: its entry is raised to ``spend``, never
        a second entry. Stops the heartbeat; returns the lines to log."""
        self._stop.set()
        with self._journal_lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None
        if not self.shared:
            self._free_room()
            self._carry()
            return []
        name, notes = self.budget.ledger, []
        try:
            self._settle_shared(spend, notes)
        except LedgerUnwritable as error:
            self.unsettled = (
                f"{error}: this run's spend {usd(float(spend.get('cost_usd', 0.0)))} "
                f"({int(spend.get('requests', 0))} requests) is NOT in ledger {name!r}; enter it before the next capped run"
            )
            notes.append(self.unsettled)
        self._free_room()
        self._carry()
        self.notes += notes
        return notes

    def _settle_shared(self, spend: dict[str, float], notes: list[str]) -> None:
        name = self.budget.ledger
        with self._lease() as (data, mine):
            entries = data["ledgers"].setdefault(name, [])
            live = data["reservations"].get(name, [])
            if mine is not None:
                live.remove(mine)
                live += batch_holds(mine, f"{self.run_name} ended before collecting it")  # openai_batch names them
                entries.append({"run": self.run_name, "lease": self.id, "time": now_stamp(), **spend})
            elif (entry := self._entry(data)) is not None:
                counted = float(entry.get("cost_usd", 0.0))
                late = max(0.0, float(spend.get("cost_usd", 0.0)) - counted)
                entry.update({**spend, "cost_usd": counted + late, "late_settle": usd(late)})
                notes.append(
                    f"ledger {name!r}: this run's reservation had been released at {usd(counted)} (its journal); "
                    f"its settle adds the {usd(late)} spent after that to the same entry"
                )
            else:
                entries.append({"run": self.run_name, "lease": self.id, "time": now_stamp(), **spend})
                notes.append(f"ledger {name!r}: this run's reservation was gone; its spend is entered once now")

    def _carry(self) -> None:
        """Keep the journal for the run's next process (a resume counts its attempts at their price)."""
        if self.journal is not None and self.carried is None:
            self.carried = carry_journal(self.journal, self.scope)

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with contextlib.suppress(OSError, ConfigError):
                self.renew()


def _fits(budget: Budget, held_cost: float, held_requests: int, cost: float, requests: int) -> bool:
    if budget.max_cost_usd is not None and held_cost + cost > budget.max_cost_usd + 1e-12:
        return False
    return budget.max_requests is None or held_requests + requests <= budget.max_requests


def reserve(
    budget: Budget,
    run_name: str,
    ceiling_cost: float | None,
    to_send: int,
    batches: Sequence[str] = (),
    scope: str | None = None,
) -> Reservation:
    """Reserve a run's planned ceiling (``ceiling_cost`` None: no price, counted as 0 where no cost
    cap is set), or raise ConfigError with the budget line when it does not fit. ``batches``: keys
    of batches in flight the run may collect; their holds become part of its reservation (their
    lines are in its plan), so a resumed run is not refused for its own batch. ``scope``: whose
    carried journals the run's become (default its name; a prompted run: its name and key)."""
    cost = ceiling_cost or 0.0
    reservation = Reservation(budget, run_name, cost, to_send, scope)
    if budget.ledger is None:
        problem = budget_problem(budget, run_name, ceiling_cost, to_send, _settled([]), 0.0, 0)
        if problem:
            raise ConfigError(problem)
        if budget.max_cost_usd is not None:  # a run on its own may use its whole cap
            reservation.cost_usd = budget.max_cost_usd
        if budget.max_requests is not None:
            reservation.requests = budget.max_requests
        if budget.ledger_file is not None:  # a private journal: what a resume of this run counts
            try:
                _open_journal(reservation, journals_folder(budget))
            except OSError as error:
                raise LedgerUnwritable(unwritable_line(journals_folder(budget), error)) from None
        return reservation
    path = budget.ledger_file
    try:
        return _reserve_shared(budget, reservation, ceiling_cost, cost, to_send, batches)
    except OSError as error:  # a read-only or full disk: refused before anything is sent
        reservation._free_room()
        if reservation._handle is not None:
            reservation._handle.close()
            reservation._handle = None
            with contextlib.suppress(OSError):
                reservation.journal.unlink()
        raise LedgerUnwritable(unwritable_line(path, error)) from None


def _reserve_shared(
    budget: Budget, reservation: Reservation, ceiling_cost: float | None, cost: float, to_send: int,
    batches: Sequence[str],
) -> Reservation:  # fmt: skip
    path, name, run_name = budget.ledger_file, budget.ledger, reservation.run_name
    with locked(path):
        data = read_ledger(path)
        reservation.notes += release_stale(data, name, budget.stale_after_s)
        live = data["reservations"].get(name, [])
        taken = [r for r in live if r.get("kind") == "batch" and r.get("batch_key") in set(batches)]
        others = [r for r in live if r not in taken]
        held = sum(r["cost_usd"] for r in taken)
        if ceiling_cost is not None and held > ceiling_cost:
            ceiling_cost = cost = reservation.cost_usd = held
        settled = _settled(data["ledgers"].get(name, []))
        problem = budget_problem(
            budget,
            run_name,
            ceiling_cost,
            to_send,
            settled,
            sum(r["cost_usd"] for r in others),
            sum(r["requests"] for r in others),
        )
        if problem:
            _write_ledger(path, data)  # the stale releases stand
            raise ConfigError(problem)
        live = others
        journal = _open_journal(reservation, journals_folder(budget), f"{name.replace('/', '_')}-")
        reservation.room = keep_room(journal.parent, reservation.id, path)
        started = time.time()
        live.append(
            {
                "id": reservation.id,
                "run": run_name,
                "scope": reservation.scope,
                **identity(),
                "started": started,
                "renewed": started,
                "cost_usd": cost,
                "requests": to_send,
                "journal": str(journal),
                "batches": {r["batch_key"]: {"batch_id": r.get("batch_id"), "cost_usd": r["cost_usd"]} for r in taken},
            }
        )
        data["reservations"][name] = live
        _write_ledger(path, data)
    reservation._beat = threading.Thread(target=reservation._heartbeat, name="ledger-heartbeat", daemon=True)
    reservation._beat.start()
    return reservation


class LedgerUnwritable(ConfigError):
    """The ledger or a journal cannot be written (a full or read-only disk): one line."""


def unwritable_line(path: Path | None, error: OSError) -> str:
    return (
        f"budget.ledger_file: cannot write {path} ({error.strerror or error}); free space or point "
        "budget.ledger_file at a writable disk"
    )


#: Disk space kept beside the journals for a run's last ledger writes, at least this much (bytes).
ROOM_BYTES = 1 << 20


def keep_room(folder: Path, lease: str, ledger: Path) -> Path:
    """Allocate (not just promise: ``posix_fallocate``) room for the ledger's next writes: if the
    disk fills while the run sends, :meth:`Reservation._write` frees it and the settle still lands.
    Raises OSError (no space, read-only) before anything is sent."""
    try:
        size = max(ROOM_BYTES, 4 * ledger.stat().st_size + (64 << 10))
    except OSError:
        size = ROOM_BYTES
    room = folder / f".room-{lease}"
    descriptor = os.open(room, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.posix_fallocate(descriptor, 0, size)
    except OSError:
        os.close(descriptor)
        room.unlink(missing_ok=True)
        raise
    os.close(descriptor)
    return room


def journals_folder(budget: Budget) -> Path | None:
    """The folder of the runs' journals, beside the ledger file (None: no ledger file)."""
    return None if budget.ledger_file is None else budget.ledger_file.parent / "spend-journals"


def _open_journal(reservation: Reservation, folder: Path, prefix: str = "") -> Path:
    journal = folder / f"{prefix}{reservation.id}.jsonl"
    journal.parent.mkdir(parents=True, exist_ok=True)
    reservation.journal = journal
    reservation._handle = open(journal, "a", encoding="utf-8")  # noqa: SIM115 - closed by settle
    return journal


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
