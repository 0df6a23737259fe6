"""A paid session settles its ledger once whatever ends it, and refuses a paid plan under an
uncapped sweep profile (src/billing/session.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from src.billing.bill import BilledReply
from src.billing.ledger import Budget, read_ledger
from src.billing.meter import Meter
from src.billing.prices import Price
from src.billing.session import PaidSession, paid_sweep_problem
from src.config.budget import budget_from_mapping, uncapped_sweep
from src.core.errors import ConfigError
from tests.helpers.paths import REPO_ROOT
from tests.helpers.signals import ctrl_c_as_in_a_terminal

#: A session that reserves, bills one attempt, says so, and waits to be stopped.
SCRIPT = """
import sys, time
from pathlib import Path
from src.core.requests import ChatRequest
from src.billing.bill import BilledReply
from src.billing.ledger import Budget
from src.billing.meter import Meter
from src.billing.prices import Price
from src.billing.session import PaidSession

budget = Budget(1.0, None, "pilot", Path(sys.argv[1]), 600.0)
session = PaidSession("stopped", Meter(Price(1.0, 1.0)), budget)
session.reserve(0.5, 3)
request = ChatRequest(messages=(("user", "hello there"),), max_tokens=10)
with session:
    admission = session.meter.admit(request, True)
    session.meter.settle(admission, BilledReply({"prompt_tokens": 1000, "completion_tokens": 1000}))
    print("billed", flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_session_settles_what_it_spent_once(tmp_path: Path, signum: int):
    ledger = tmp_path / "spend.json"
    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(ledger)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_as_in_a_terminal,
    )
    try:
        assert process.stdout.readline().strip() == "billed"
        assert read_ledger(ledger)["reservations"]["pilot"], "reserved while it runs"
        process.send_signal(signum)
        process.wait(timeout=30)
    finally:
        process.kill()
    # ended by the signal (raised as Ctrl-C is: session.Terminated for SIGTERM), not by its 60 s sleep
    assert process.returncode in (1, -signal.SIGINT)
    data = read_ledger(ledger)
    assert data["reservations"]["pilot"] == []
    entries = data["ledgers"]["pilot"]
    assert [(e["run"], e["cost_usd"], e["requests"]) for e in entries] == [("stopped", pytest.approx(0.002), 1)]


def test_settle_is_once_and_usage_counts_billed_retries_not_cached_answers(tmp_path: Path):
    from src.core.requests import ChatRequest

    budget = Budget(1.0, None, "pilot", tmp_path / "spend.json", 600.0)
    session = PaidSession("one", Meter(Price(1.0, 2.0)), budget)
    session.reserve(0.1, 1)
    request = ChatRequest(messages=(("user", "hi"),), max_tokens=10)
    with session:
        for first in (True, False):  # a billed fault, then its retry
            admission = session.meter.admit(request, first)
            session.meter.settle(admission, BilledReply({"prompt_tokens": 100, "completion_tokens": 10}))
        session.cached = 4
    session.settle()
    usage = session.usage()
    assert (usage["sent"], usage["cached"], usage["attempts"], usage["billed_attempts"]) == (1, 4, 2, 2)
    assert usage["retried"] == 1 and usage["cost"] == pytest.approx(2 * (100 * 1.0 + 10 * 2.0) / 1e6)
    entries = read_ledger(tmp_path / "spend.json")["ledgers"]["pilot"]
    assert len(entries) == 1 and entries[0]["cost_usd"] == pytest.approx(usage["cost"])


def test_a_paid_plan_under_an_uncapped_profile_is_refused(tmp_path: Path):
    profile = tmp_path / "p.yaml"
    sweep = yaml.safe_load((REPO_ROOT / "sweep.yaml").read_text(encoding="utf-8"))["sweep"]
    profile.write_text(yaml.safe_dump({"sweep": {**sweep, "profile": "paper", "max_cost_usd": None}}))
    block = {"sweep_file": str(profile), "ledger_file": str(tmp_path / "spend.json"), "stale_after_s": 600}
    block["price_max_age_days"] = 90
    assert uncapped_sweep(budget_from_mapping(block)) == ("paper", str(profile))
    line = paid_sweep_problem(uncapped_sweep(budget_from_mapping(block)), "adv_p timex", 3.79, 1200)
    assert line.startswith("budget: profile 'paper' sends paid requests and sets no cap:")
    assert "up to $3.79 (1200 requests)" in line and f"set sweep.max_cost_usd in {profile}" in line
    assert paid_sweep_problem(uncapped_sweep(budget_from_mapping(block)), "local", 0.0, 1200) is None  # free
    budget = Budget(None, None, None, tmp_path / "spend.json", 600.0)
    session = PaidSession(
        "adv_p timex", Meter(Price(1.0, 1.0)), budget, sweep=uncapped_sweep(budget_from_mapping(block))
    )
    with pytest.raises(ConfigError, match="sets no cap"):
        session.reserve(3.79, 1200)
    assert not (tmp_path / "spend.json").exists()
    profile.write_text(yaml.safe_dump({"sweep": {**sweep, "profile": "paper", "max_cost_usd": 300}}))
    assert uncapped_sweep(budget_from_mapping(block)) is None and uncapped_sweep(budget) is None


def test_prices_age_from_their_read_date(monkeypatch):
    import datetime

    from src.billing.prices import price_age_warning, today

    price = Price(1.0, 2.0, read="2025-07")
    assert price_age_warning("m", price, 90, datetime.date(2025, 9, 29)) is None  # 90 days after July 1
    line = price_age_warning("m", price, 90, datetime.date(2025, 9, 30))
    assert line.startswith(
        "price of m read 2025-07, 91 days before 2025-09-30 (more than budget.price_max_age_days=90)"
    )
    assert "no read date" in price_age_warning("m", Price(1.0, 2.0), 90, datetime.date(2025, 9, 30))
    assert price_age_warning("local", Price(0.0, 0.0, None, "local model"), 90) is None
    monkeypatch.setenv("TEMPGEN_TODAY", "2026-01-02")
    assert today() == datetime.date(2026, 1, 2)
    monkeypatch.delenv("TEMPGEN_TODAY")
    assert abs((today() - datetime.date.today()).days) <= 1
