"""What earlier processes of a run were billed, so a resumed run's usage counts it at its real price.

A run's journal (:mod:`src.billing.ledger`) has one line per attempt: its request's digest, its
mode, its tokens, whether it was billed and its cost by source. When a process of a run ends
(settled, or released as stale) its journal is *carried*: kept under
``spend-journals/carried/<run>-<key>/`` beside the ledger instead of deleted (by the run's key,
not its name: another profile's run of the same name is another run). The next process of the
same run (the same command, resumed after Ctrl-C, SIGTERM, SIGKILL or failed requests) reads
those journals and, for every request whose answer it takes from the response cache or sends
again, adds what the earlier processes were billed for it (retries included) to its usage: the
run's ``usage.json``, ``usage.*`` metrics, summary and history then count the whole run's spend
at what the provider billed, not the cached answers at the list price. The ledger is untouched:
each process settled its own spend there once. A run that completes drops the carried journals
(its usage has counted them), so a later rerun of a finished run reports its answers as cached.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from src.billing.bill import Bill
from src.billing.lease import carried_folder, journal_lines
from src.billing.meter import request_digest
from src.core.requests import ChatRequest


def _bill_of_line(line: dict) -> Bill:
    """One journal line as a bill: its tokens and cost by source, billed or not."""
    bill = Bill(attempts=int(line.get("attempts", 1)), billed_attempts=int(line.get("billed", 0)))
    bill.prompt_tokens = int(line.get("prompt_tokens", 0))
    bill.completion_tokens = int(line.get("completion_tokens", 0))
    bill.estimated_prompt_tokens = int(line.get("estimated_prompt_tokens", 0))
    bill.estimated_completion_tokens = int(line.get("estimated_completion_tokens", 0))
    bill.cost_reported = float(line.get("cost_reported", 0.0))
    bill.cost_price_table = float(line.get("cost_price_table", 0.0))
    bill.cost_estimated = float(line.get("cost_estimated", 0.0))
    bill.cost_disputed = float(line.get("cost_disputed", 0.0))
    bill.odd_replies = int(line.get("odd_replies", 0))
    bill.disputed_replies = int(line.get("disputed_replies", 0))
    return bill


class EarlierAttempts:
    """The attempts earlier processes of one run were billed for, by request digest.

    :meth:`take` hands a request's earlier bill over once (an identical prompt later in the run
    is a duplicate and gets nothing); :meth:`drop` deletes the journals it read once the run's
    usage has counted them (the run completed)."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self.bills: dict[str, Bill] = {}
        for path in paths:
            for line in journal_lines(path):
                digest = line.get("request")
                if isinstance(digest, str):
                    self.bills.setdefault(digest, Bill()).add(_bill_of_line(line))

    @classmethod
    def of_run(cls, journals: Path | None, scope: str) -> EarlierAttempts:
        """The carried journals of ``scope`` (a run's name and key) under ``journals`` (none when it is None)."""
        if journals is None:
            return cls([])
        return cls(sorted(carried_folder(journals, scope).glob("*.jsonl")))

    def take(self, request: ChatRequest) -> Bill | None:
        """What earlier processes were billed for ``request`` (None: nothing), once."""
        if not self.bills:
            return None
        return self.bills.pop(request_digest(request), None)

    def total(self) -> Bill:
        """What the journals hold that no request has taken yet."""
        total = Bill()
        for bill in self.bills.values():
            total.add(bill)
        return total

    def drop(self, also: Path | None = None) -> None:
        """Delete the journals read (and ``also``, this process's own carried journal)."""
        for path in [*self.paths, *([also] if also is not None else [])]:
            with contextlib.suppress(OSError):
                path.unlink()


__all__ = ["EarlierAttempts"]
