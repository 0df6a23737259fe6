"""The meter prices every attempt from what its reply reported (or counts it and says so) and
admits an attempt only when the run's allowance holds its ceiling."""

from __future__ import annotations

import pytest

from src.billing.bill import BilledReply
from src.billing.ledger import Budget, reserve
from src.billing.meter import Meter
from src.billing.prices import Price, TokenCounter
from src.core.requests import ChatRequest

PRICE = Price(1.0, 2.0, modes={"batch": (0.5, 1.0)})  # USD per million tokens
REQUEST = ChatRequest(messages=(("user", "x" * 400),), max_tokens=100)  # estimate 100 prompt tokens, bound 408


def test_reported_usage_and_cost_are_kept_and_missing_figures_are_counted_and_labelled():
    meter = Meter(PRICE, TokenCounter())
    reported = meter.price_attempt(REQUEST, BilledReply({"prompt_tokens": 90, "completion_tokens": 10, "cost": 1.2e-4}))
    assert (reported.prompt_tokens, reported.cost_reported, reported.cost_price_table, reported.cost_estimated) == (
        90,
        1.2e-4,
        0.0,
        0.0,
    )
    assert (reported.disputed_replies, reported.cost_disputed) == (0, 0.0)  # above the table: the bill
    # below its own tokens at the table (1.1e-4): kept as reported, topped up to the table for the cap
    low = meter.price_attempt(REQUEST, BilledReply({"prompt_tokens": 90, "completion_tokens": 10, "cost": 7e-5}))
    assert (low.cost_reported, low.disputed_replies) == (7e-5, 1)
    assert low.cost_disputed == pytest.approx(4e-5) and low.cost == pytest.approx(1.1e-4)
    rounded = meter.price_attempt(REQUEST, BilledReply({"prompt_tokens": 90, "completion_tokens": 10, "cost": 1.09e-4}))
    assert rounded.disputed_replies == 0  # within the rounding tolerance of listed prices
    table = meter.price_attempt(REQUEST, BilledReply({"prompt_tokens": 90, "completion_tokens": 10}))
    assert table.cost_price_table == pytest.approx((90 * 1 + 10 * 2) / 1e6) and table.estimated_prompt_tokens == 0
    estimated = meter.price_attempt(REQUEST, BilledReply({}, generated_text="y" * 40))
    # at the bound it was admitted under, never below the truth: 408 (bytes + template), max_tokens 100
    assert (estimated.estimated_prompt_tokens, estimated.estimated_completion_tokens) == (408, 100)
    assert estimated.cost_estimated == pytest.approx((408 + 200) / 1e6) and estimated.cost_price_table == 0.0
    batch = meter.price_attempt(REQUEST, BilledReply({"prompt_tokens": 90, "completion_tokens": 10}), "batch")
    assert batch.cost_price_table == pytest.approx(table.cost_price_table / 2)
    unbilled = meter.price_attempt(REQUEST, None)
    assert (unbilled.attempts, unbilled.billed_attempts, unbilled.cost) == (1, 0, 0.0)


def test_an_attempt_is_admitted_only_while_spent_plus_in_flight_ceilings_fit(tmp_path):
    ceiling = (408 * 1 + 100 * 2) / 1e6  # the bound: UTF-8 bytes + template markers, and max_tokens
    budget = Budget(max_cost_usd=2.5 * ceiling, max_requests=3)
    meter = Meter(PRICE, TokenCounter(), reserve(budget, "r", ceiling, 1))
    first, second = meter.admit(REQUEST, True), meter.admit(REQUEST, True)
    assert first and second and meter.admit(REQUEST, True) is None  # a third ceiling would pass 2.5
    meter.settle(first, BilledReply({"prompt_tokens": 100, "completion_tokens": 0}))  # cost far below its ceiling
    third = meter.admit(REQUEST, True)
    assert third is not None and meter.admit(REQUEST, False) is None  # the cost cap again, not requests
    meter.settle(second, None)
    meter.settle(third, None)
    assert meter.admit(REQUEST, True) is None  # max_requests=3: a fourth request is refused
    retry = meter.admit(REQUEST, False)
    assert retry is not None  # a retry is no new request
    meter.release(retry)
    assert meter.requests == 3 and meter.in_flight == 0
    assert meter.total.attempts == 3 and meter.total.billed_attempts == 1
    assert "budget: stopped sending" in meter.exhausted() and "budget.max_requests=3" in meter.exhausted()


def test_without_a_cap_every_attempt_is_admitted_and_still_counted():
    meter = Meter(None, TokenCounter())
    admissions = [meter.admit(REQUEST, True) for _ in range(50)]
    assert all(admissions) and meter.ceiling(REQUEST) == 0.0
    for admission in admissions:
        meter.settle(admission, BilledReply({"prompt_tokens": 3, "completion_tokens": 1, "cost": 1e-6}))
    assert meter.total.cost_reported == pytest.approx(50e-6) and meter.spend()["requests"] == 50


def test_a_flex_attempt_is_held_at_the_list_price_and_billed_at_the_tier_that_served_it():
    meter = Meter(Price(1.0, 2.0, modes={"flex": (0.5, 1.0)}), TokenCounter())
    assert meter.ceiling(REQUEST, "flex") == meter.ceiling(REQUEST, "sync")  # the standard tier may serve it
    usage = {"prompt_tokens": 90, "completion_tokens": 10}
    flex = meter.price_attempt(REQUEST, BilledReply(usage, service_tier="flex"), "flex")
    standard = meter.price_attempt(REQUEST, BilledReply(usage, service_tier="default"), "flex")
    unnamed = meter.price_attempt(REQUEST, BilledReply(usage), "flex")
    assert flex.cost_price_table == pytest.approx((90 * 0.5 + 10 * 1.0) / 1e6)
    assert standard.cost_price_table == pytest.approx(2 * flex.cost_price_table)
    assert unnamed.cost_price_table == flex.cost_price_table


def test_a_reported_cost_above_the_ceiling_is_named_only_for_attempts_admitted_here(caplog):
    """An attempt an earlier process sent (:meth:`Meter.already_sent`) has no ceiling here (0):
    its reported cost is its bill, not a price below the provider's."""
    meter = Meter(PRICE, TokenCounter())
    reply = BilledReply({"prompt_tokens": 90, "completion_tokens": 10, "cost": 6e-5})
    with caplog.at_level("WARNING", logger="src.billing.meter"):
        bill = meter.settle(meter.already_sent(REQUEST, True, "batch"), reply)
    assert bill.cost_reported == 6e-5 and meter.total.cost == 6e-5
    assert "above its admitted ceiling" not in caplog.text
    with caplog.at_level("WARNING", logger="src.billing.meter"):
        meter.settle(meter.admit(REQUEST, True), BilledReply({"prompt_tokens": 90, "completion_tokens": 10, "cost": 1}))
    assert caplog.text.count("above its admitted ceiling") == 1
