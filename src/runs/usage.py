"""A dataset's usage: what its requests sent and cost, sent apart from cached, split by source.

``usage.json``, the ``<task>.<dataset>.usage.*`` metrics, the summaries and the report all read
these fields. New requests count every attempt (``attempts``, ``retried``) and every billed one
(``billed_attempts``, also those then retried or failed); their tokens include the ones counted
on this machine where a reply reported none (``estimated_*``), and their ``cost`` is split into
``cost_reported`` (the provider's ``usage.cost``), ``cost_price_table`` (reported tokens at the
model file's price), ``cost_estimated`` (estimated tokens at that price) and ``cost_disputed``
(what a reported cost below its own tokens at the price adds to reach them: the cap's reading); a resumed run's
requests count what its earlier, interrupted processes were billed for them too (``sent``, every
attempt, at the price then billed: :mod:`src.billing.earlier`). A prompt identical
to one already counted in the run is a ``duplicate`` with no tokens or cost of its own; answers
from the response cache are counted apart (``cached_*``: what they cost when they were bought).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from src.backends.base import GenerationResult
from src.billing.bill import BILL_FIELDS, Bill
from src.billing.ledger import usd
from src.billing.prices import Price
from src.billing.reported import undercuts
from src.core.requests import ChatRequest

USAGE_FIELDS = (
    "requests",
    "sent",
    "cached",
    "duplicates",
    "failed",
    "retried",
    *BILL_FIELDS,
    "cached_prompt_tokens",
    "cached_completion_tokens",
    "cached_cost",
    "latency_s",
)
#: The usage fields a sweep total keeps (latency depends on the machine).
TOTAL_FIELDS = tuple(name for name in USAGE_FIELDS if name != "latency_s")


def local_bill(result: GenerationResult, price: Price | None) -> Bill:
    """The bill of an answer from a backend that keeps none (a local engine): its own token counts,
    at the model file's price (free for a local model)."""
    prompt = int(result.usage.get("prompt_tokens") or 0)
    completion = int(result.usage.get("completion_tokens") or 0)
    cost = 0.0 if price is None else price.cost(prompt, completion)
    bill = Bill.of_tokens(prompt, completion, cost, reported_cost=False)
    bill.attempts = max(1, int(result.attempts or 1))
    return bill


def bill_of(result: GenerationResult, price: Price | None) -> Bill:
    """What a newly sent request cost: the backend's bill, else its local token counts."""
    if result.bill is not None:
        return result.bill
    if result.text is None:
        return Bill(attempts=max(1, int(result.attempts or 1)))
    return local_bill(result, price)


def cached_cost(result: GenerationResult, price: Price | None) -> float:
    """What a cached answer cost when it was bought: its reported cost, else (none, or a disputed one)
    its tokens at the price."""
    usage = result.usage or {}
    table = None
    if price is not None:
        table = price.cost(float(usage.get("prompt_tokens") or 0), float(usage.get("completion_tokens") or 0))
    if usage.get("cost") is not None:
        reported = float(usage["cost"])
        return table if table is not None and undercuts(reported, table) else reported  # as its bill counted it
    return 0.0 if table is None else table


def dataset_usage(
    results: Sequence[GenerationResult],
    price: Price | None,
    seen: set[str],
    key_of: Callable,
    earlier: Callable[[ChatRequest], Bill | None] | None = None,
) -> dict[str, float]:
    """The usage of one dataset's ``results``; ``seen`` holds the request keys already counted in
    this run (updated here), ``key_of(request)`` gives a request's key (None: never identical).
    ``earlier(request)``: what earlier, interrupted processes of this run were billed for the
    request (:mod:`src.billing.earlier`): a cached answer they bought counts as sent at that
    bill, and their attempts of a request sent again now are added to its bill."""
    usage = dict.fromkeys(USAGE_FIELDS, 0.0)
    usage["requests"] = float(len(results))
    for result in results:
        key = key_of(result.request)
        if key is not None and key in seen:
            usage["duplicates"] += 1
            continue
        if key is not None:
            seen.add(key)
        before = earlier(result.request) if earlier is not None else None
        if before is not None:  # bought (or tried) by an earlier process of this run: its real bill
            usage["sent"] += 1
            usage["failed"] += result.text is None
            bill = Bill().add(before)
            if not result.cached:
                usage["latency_s"] += result.latency_s
                bill.add(bill_of(result, price))
            for name, value in bill.as_dict().items():
                usage[name] += value
            continue
        if result.cached:
            usage["cached"] += 1
            usage["cached_prompt_tokens"] += float(result.usage.get("prompt_tokens") or 0)
            usage["cached_completion_tokens"] += float(result.usage.get("completion_tokens") or 0)
            usage["cached_cost"] += cached_cost(result, price)
            continue
        usage["sent"] += 1
        usage["failed"] += result.text is None
        usage["latency_s"] += result.latency_s
        for name, value in bill_of(result, price).as_dict().items():
            usage[name] += value
    usage["retried"] = usage["attempts"] - usage["sent"]
    return usage


def spend_line(total: dict[str, float], ceiling: float | None) -> str:
    """One line: what the run spent against its plan's ceiling, split by where each figure came from."""

    cost = total.get("cost", 0.0)
    against = "no price" if ceiling is None else f"plan ceiling {usd(ceiling)}"
    odd = int(total.get("odd_replies", 0))
    odd_line = f"; {odd} odd replies (figures no finite number >= 0, priced as unreported)" if odd else ""
    disputed = int(total.get("disputed_replies", 0))
    if disputed:
        odd_line += (
            f"; {disputed} replies reported a cost below their tokens at the price table "
            f"(+{usd(total.get('cost_disputed', 0.0))} counted against the cap)"
        )
    return (
        f"spent {usd(cost)} ({against}): provider-reported {usd(total.get('cost_reported', 0.0))}, "
        f"price table {usd(total.get('cost_price_table', 0.0))}, estimated {usd(total.get('cost_estimated', 0.0))}; "
        f"{int(total.get('billed_attempts', 0))} billed attempts of {int(total.get('attempts', 0))}, "
        f"{int(total.get('estimated_prompt_tokens', 0)) + int(total.get('estimated_completion_tokens', 0))} "
        f"tokens estimated{odd_line}"
    )
