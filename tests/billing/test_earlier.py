"""Carried journals belong to one run, by its name and key (issue 48)."""

from __future__ import annotations

from pathlib import Path

from src.billing.bill import BilledReply
from src.billing.earlier import EarlierAttempts
from src.billing.ledger import Budget, journals_folder, reserve
from src.billing.meter import Meter
from src.billing.prices import Price, TokenCounter
from src.core.requests import ChatRequest

REQUEST = ChatRequest(messages=(("user", "It rained on Friday ."),), max_tokens=16)


def _interrupted(budget: Budget, scope: str) -> None:
    """A process of run ``m-D`` under ``scope`` that bought one answer and ended before completing."""
    meter = Meter(Price(1.0, 2.0), TokenCounter(), reserve(budget, "m-D", 0.01, 1, scope=scope))
    meter.settle(meter.admit(REQUEST, True), BilledReply({"prompt_tokens": 10, "completion_tokens": 2}))
    meter.reservation.settle(meter.spend())


def test_another_profiles_run_of_the_same_name_neither_reads_nor_drops_this_runs_journal(tmp_path: Path):
    """A finished run dropped every carried journal of its run *name*: the smoke profile's ``m-D``
    completing deleted what the paper profile's interrupted ``m-D`` had bought, whose rerun then
    reported those answers as free."""
    budget = Budget(max_cost_usd=1.0, ledger="s", ledger_file=tmp_path / "spend.json", stale_after_s=600)
    _interrupted(budget, "m-D-paperkey")
    folder = journals_folder(budget)
    smoke = EarlierAttempts.of_run(folder, "m-D-smokekey")
    assert smoke.take(REQUEST) is None  # not its purchases
    smoke.drop()  # the smoke run completes
    paper = EarlierAttempts.of_run(folder, "m-D-paperkey")
    bill = paper.take(REQUEST)
    assert bill is not None and (bill.billed_attempts, bill.prompt_tokens) == (1, 10)
    assert bill.cost_price_table == (10 * 1.0 + 2 * 2.0) / 1e6
