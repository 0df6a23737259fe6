"""The forecast of a configuration: what it will send and cost, per mode, before the first request
(``python -m src.plan`` prints these; :mod:`src.planning` sizes a study).

The forecast of one configuration (requests, identical prompts, cache hits, what is left to send,
prompt tokens, the output-token ceiling) is built from the run's own requests and its own cache
lookup, so its ``to_send`` is exactly what the run sends; nothing here starts a backend or sends
a request. Prompt tokens are counted (the model's tokenizer) or estimated (characters / 4); the
cost is a true ceiling: every prompt at its bound (the exact count, else one token per UTF-8
byte: :meth:`~src.billing.prices.TokenCounter.bound`) and every answer at its ``max_tokens``, one
attempt per request (a billed retry is counted when it happens, and the run's cap holds it
attempt by attempt at the same bounds: :mod:`src.billing.meter`), so a plan that fits a cap
never stops at its first attempt. Each mode (``sync``, ``batch``, ``flex``) has its cost at the
model file's price for it and an expected wait.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from src.billing.prices import ESTIMATE, MIXED, MODES, TOKENIZER, Price, TokenCounter, cap_mode
from src.core.requests import ChatRequest

#: Hours the Batch API may take (OpenAI's only completion window).
BATCH_WINDOW_H = 24.0


def forecast_configuration(
    name: str,
    backend: Any,
    batches: Sequence[tuple[str, Sequence[ChatRequest]]],
    price: Price | None,
    counter: TokenCounter,
    seen: set[str] | None = None,
    mode: str = "sync",
    concurrency: int | None = None,
    min_tokens_per_s: float | None = None,
) -> dict[str, Any]:
    """What running ``batches`` ((task/dataset, requests), in the run's order) through the cached
    ``backend`` sends: identical prompts once, cache hits (the lookup the run makes) not at all.
    ``seen`` (request keys planned by earlier configurations of the same sweep, updated here):
    their answers will be cached by the time this configuration runs, so they count as duplicates
    (e.g. every model of a sweep sent to one self-hosted model under the same id).

    ``mode`` is the run's; ``modes`` prices every mode. ``concurrency`` and ``min_tokens_per_s``
    (an HTTP backend's options) give the synchronous modes' wait at most.
    """

    seen = set() if seen is None else seen
    datasets: dict[str, dict[str, Any]] = {}
    exact = estimated = 0
    for label, requests in batches:
        row = {"requests": len(requests), "duplicates": 0, "cached": 0, "to_send": 0, "prompt_tokens": 0}
        row.update(prompt_token_bound=0, output_token_ceiling=0)
        for request in requests:
            key = backend.request_key(request)
            if key is not None:
                if key in seen:
                    row["duplicates"] += 1
                    continue
                seen.add(key)
                if backend.has_answer(request):
                    row["cached"] += 1
                    continue
            tokens, is_exact = counter.count(request)
            exact, estimated = exact + is_exact, estimated + (not is_exact)
            row["to_send"] += 1
            row["prompt_tokens"] += tokens
            row["prompt_token_bound"] += counter.bound(request)
            row["output_token_ceiling"] += request.max_tokens
        datasets[label] = row
    totals = {key: sum(row[key] for row in datasets.values()) for key in next(iter(datasets.values()), {})}
    method = TOKENIZER if exact and not estimated else ESTIMATE if estimated and not exact else MIXED
    if not exact and not estimated:
        method = "none to send"
    mode_price = None if price is None else price.for_mode(mode)
    plan: dict[str, Any] = {
        "configuration": name,
        **totals,
        "prompt_tokens_counted_by": method if method != TOKENIZER else f"{TOKENIZER} ({counter.name})",
        "mode": mode,
        "price": None if mode_price is None else mode_price.describe(),
        "datasets": datasets,
    }
    prompt, output = totals.get("prompt_token_bound", 0), totals.get("output_token_ceiling", 0)
    plan.update(plan_costs(None if price is None else price.for_mode(cap_mode(mode)), prompt, output))
    plan["modes"] = mode_table(price, prompt, output, totals.get("to_send", 0), concurrency, min_tokens_per_s)
    return plan


def plan_costs(price: Price | None, prompt_tokens: float, output_tokens: float) -> dict[str, float | None]:
    """The prompts' cost at their bound, the output ceiling's cost and their sum in USD; None for each
    when the price is unknown."""
    if price is None:
        return {"prompt_cost_usd": None, "output_ceiling_cost_usd": None, "ceiling_cost_usd": None}
    prompt, output = price.cost(prompt_tokens, 0), price.cost(0, output_tokens)
    return {"prompt_cost_usd": prompt, "output_ceiling_cost_usd": output, "ceiling_cost_usd": prompt + output}


def mode_table(
    price: Price | None,
    prompt_tokens: float,
    output_tokens: float,
    to_send: int,
    concurrency: int | None,
    min_tokens_per_s: float | None,
) -> dict[str, dict[str, Any]]:
    """Per mode: the cost ceiling (the cap's), the cost were every reply billed at the mode's own
    rates, whether the model file prices the mode itself, and the wait."""
    table = {}
    for mode in MODES:
        priced = None if price is None else price.for_mode(mode)
        capped = None if price is None else price.for_mode(cap_mode(mode))
        table[mode] = {
            "ceiling_cost_usd": None if capped is None else capped.cost(prompt_tokens, output_tokens),
            "at_mode_rates_usd": None if priced is None else priced.cost(prompt_tokens, output_tokens),
            "list_price_stands_in": bool(priced is not None and priced.fallback),
            "documented_discount": bool(priced is not None and mode in priced.discounts),
            "wait": expected_wait(mode, to_send, output_tokens, concurrency, min_tokens_per_s),
        }
    return table


def expected_wait(
    mode: str, to_send: int, output_tokens: float, concurrency: int | None, min_tokens_per_s: float | None
) -> str:
    """How long the mode may take: the Batch API's window, or every answer at the slowest
    generation speed the backend waits for, ``concurrency`` at a time (an upper bound)."""
    if to_send == 0:
        return "nothing to send"
    if mode == "batch":
        return f"up to {BATCH_WINDOW_H:g} h (the Batch API's completion window; often far less)"
    if not concurrency or not min_tokens_per_s:
        return "unknown (a local model: see docs/pipeline.md for measured times)"
    seconds = math.ceil(output_tokens / min_tokens_per_s / concurrency)
    slower = "; flex is served when capacity allows and may wait longer" if mode == "flex" else ""
    return f"at most {_duration(seconds)} ({concurrency} in flight at {min_tokens_per_s:g} tokens/s each){slower}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
