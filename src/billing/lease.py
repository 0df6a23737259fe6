"""When a run's reservation (its *lease*) may be released, and what releasing it settles.

A reservation in the ledger is a lease its run renews: the run's heartbeat writes ``renewed``
into it every :data:`HEARTBEAT_S` seconds (and touches the run's journal). Another process
releases a lease only by this rule:

* **same process namespace** (same host name, same boot id AND same pid namespace: a container
  with the host's name but its own pids is not "the same host"): when its process is gone (the
  pid is not running, or runs another program started later, told by the process start time);
* **anywhere** (and whenever the namespace cannot be told): when neither its renewal in the
  ledger nor its journal's time has moved for ``budget.stale_after_s``. Two machines' clocks are
  never compared: a lease from this machine (same host and boot) is judged by its renewal time;
  one from another machine by what this machine saw, recorded in the lease (``seen``), so a
  skewed clock cannot make a live run look dead. A journal that cannot be read from here is no
  evidence on its own: the renewal in the ledger decides.

A released lease is settled at the sum of its journal (what the run was billed), as one ledger
entry carrying the lease id; the run, if it still lives, finds its lease gone at its next
admission and stops (:meth:`src.billing.ledger.Reservation.check`). Batches the lease held in
flight become *batch holds*: reservations at the batches' ceilings that no rule releases, taken
over by the run that collects them (docs/cost.md).
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from pathlib import Path
from typing import Any

HEARTBEAT_S = 30.0


def now_stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def pid_namespace() -> str:
    """This process's pid namespace (``pid:[4026531836]``), "" where /proc cannot tell."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def process_start(pid: int) -> str | None:
    """The boot and start time of process ``pid`` (None where /proc cannot tell): with the pid,
    it names one process even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return f"{boot_id()}:{stat.rpartition(')')[2].split()[19]}"


def identity() -> dict[str, Any]:
    """What a lease records of its owner, to tell later whether the owner is alive."""
    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "boot_id": boot_id(),
        "pid_ns": pid_namespace(),
        "pid": pid,
        "process_start": process_start(pid),
    }


def same_namespace(lease: dict[str, Any]) -> bool:
    """Whether a pid in ``lease`` names a process visible here: same host name, boot and pid
    namespace, each known on both sides (unknown: not the same, the heartbeat rule decides)."""
    here = (socket.gethostname(), boot_id(), pid_namespace())
    there = (lease.get("host"), lease.get("boot_id"), lease.get("pid_ns"))
    return all(here) and here == there


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def same_clock(lease: dict[str, Any]) -> bool:
    """Whether ``lease`` was stamped by this machine's clock (same host name and boot, both known)."""
    here = (socket.gethostname(), boot_id())
    return all(here) and here == (lease.get("host"), lease.get("boot_id"))


def _journal_time(lease: dict[str, Any]) -> float | None:
    try:
        return Path(lease.get("journal", "")).stat().st_mtime
    except OSError:
        return None  # unreadable from here (another machine's path): the renewal in the ledger decides


def stale_reason(lease: dict[str, Any], stale_after_s: float, now: float | None = None) -> str | None:
    """Why a lease may be released (its run is gone), or None while its run may still be going.
    A batch hold is never stale: the batch runs at the provider whatever happened to its run.

    Two machines' clocks are never compared: a lease stamped by this machine's clock is judged
    by its renewal time; one from another machine by what this machine saw, recorded in the lease
    (``seen``, keyed by this clock): stale once its renewal and its journal's time have not moved
    for ``stale_after_s`` of this clock (so the first look from here only starts the watch)."""
    if lease.get("kind") == "batch":
        return None
    now = time.time() if now is None else now
    if same_namespace(lease):
        pid = int(lease.get("pid", -1))
        if not _alive(pid):
            return f"process {pid} is gone"
        started = lease.get("process_start")
        if started is not None and process_start(pid) not in (None, started):
            return f"process {pid} is another program now"
    journal_time = _journal_time(lease)
    if same_clock(lease):
        beat = max(float(lease.get("renewed") or lease.get("started") or 0.0), journal_time or 0.0)
        if now - beat > stale_after_s:
            return f"no heartbeat for {now - beat:.0f} s (budget.stale_after_s={stale_after_s:g})"
        return None
    return _watched(lease, [lease.get("renewed") or lease.get("started"), journal_time], stale_after_s, now)


def _watched(lease: dict[str, Any], signature: list, stale_after_s: float, now: float) -> str | None:
    """The rule for a lease from another clock: unchanged ``signature`` for ``stale_after_s`` here."""
    watcher = f"{socket.gethostname()}:{boot_id()}"
    seen = lease.setdefault("seen", {})
    mine = seen.get(watcher)
    if not isinstance(mine, dict) or mine.get("signature") != signature:
        seen[watcher] = {"signature": signature, "at": now}
        return None
    quiet = now - float(mine.get("at", now))
    if quiet > stale_after_s:
        return f"no heartbeat seen from here for {quiet:.0f} s (budget.stale_after_s={stale_after_s:g})"
    return None


CARRIED = "carried"


def carried_folder(journals: Path, scope: str) -> Path:
    """Where the journals of the ended processes of ``scope`` (a run: its name and key) are kept
    (``journals``: the folder of live journals, ``spend-journals`` beside the ledger file)."""
    return journals / CARRIED / re.sub(r"[^A-Za-z0-9._=-]+", "_", scope)


def carry_journal(journal: Path, scope: str) -> Path | None:
    """Keep an ended process's journal for the next process of its run; the new path (None: no journal)."""
    target = carried_folder(journal.parent, scope) / journal.name
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        journal.replace(target)
    except OSError:
        return None
    return target


def journal_lines(path: Path) -> list[dict[str, Any]]:
    """A journal's lines (a torn last line is skipped; an unreadable journal has none)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    items = []
    for line in text.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            items.append(item)
    return items


def journal_total(path: Path) -> dict[str, float]:
    """The cost, requests and attempts a journal recorded."""
    total = {"cost_usd": 0.0, "requests": 0, "attempts": 0}
    for item in journal_lines(path):
        total["cost_usd"] += float(item.get("cost_usd", 0.0))
        total["requests"] += int(item.get("requests", 0))
        total["attempts"] += int(item.get("attempts", 0))
    return total


def batch_holds(lease: dict[str, Any], why: str) -> list[dict[str, Any]]:
    """The batch holds a lease's batches in flight become when the lease ends without collecting them."""
    return [
        {
            "id": f"batch-{key}",
            "kind": "batch",
            "batch_key": key,
            "batch_id": held.get("batch_id"),
            "run": lease.get("run"),
            "cost_usd": float(held["cost_usd"]),
            "requests": 0,  # the lines' requests are counted in the run's entry
            "started": time.time(),
            "why": why,
        }
        for key, held in (lease.get("batches") or {}).items()
    ]


def release_stale(data: dict[str, Any], name: str, stale_after_s: float, own: str | None = None) -> list[str]:
    """Release the stale leases of ledger ``name`` in ``data``: each settled at its journal's sum
    (one entry, with the lease id), its batches in flight kept as holds; the lines to log.
    ``own``: the caller's lease id, alive by definition (it may just have woken from a pause)."""
    kept, notes = [], []
    for lease in data["reservations"].get(name, []):
        why = None if lease.get("id") == own else stale_reason(lease, stale_after_s)
        if why is None:
            kept.append(lease)
            continue
        journal = Path(lease["journal"])
        total = journal_total(journal)
        data["ledgers"].setdefault(name, []).append(
            {"run": lease["run"], "lease": lease["id"], "time": now_stamp(), "stale": why, **total}
        )
        carry_journal(
            journal, lease.get("scope") or lease["run"]
        )  # its next process counts it (src/billing/earlier.py)
        holds = batch_holds(lease, f"its run's lease was released ({why})")
        kept += holds
        held = f"; {len(holds)} batches in flight stay reserved at their ceiling" if holds else ""
        notes.append(
            f"ledger {name!r}: released the stale reservation of {lease['run']} ({why}); "
            f"settled at its journal: ${total['cost_usd']:.6g}, {total['requests']} requests{held}"
        )
    data["reservations"][name] = kept
    return notes
