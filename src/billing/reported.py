"""A provider's own figures (a reply's ``usage``), checked before anything counts them.

A cost or a token count is used only when it is a finite number >= 0 (a numeric string such
as ``"0.002"`` is converted; a token count must be a whole number). Anything else (``true``,
NaN, infinity, a negative number, ``"n/a"``, a list) is an *odd* figure: it is dropped, named in
:attr:`Reported.odd`, and the attempt is priced as if the reply had not said it (from the price
table, or at the estimate's bound), never a crash and never a non-finite number in a ledger.
A negative cost would free room under the cap, NaN passes every comparison, ``true`` counts $1.

OpenRouter reports ``usage.cost`` (what it charged the account) and
``usage.cost_details.upstream_inference_cost`` (what the upstream provider charged). With the
user's own provider key (BYOK, ``usage.is_byok: true``, or a cost of 0 beside a positive
upstream cost) the upstream provider bills that key directly, so the spend is the sum; on other
replies the upstream figure repeats the cost and is not added again.

A checked cost is still only the provider's word: one below the reply's own token counts at the
model file's price (:func:`undercuts`) is disputed by the meter and counted at the table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

COUNT_FIELDS = ("prompt_tokens", "completion_tokens")

#: How far a reported cost may fall below its tokens at the price table before it is disputed
#: (per-million prices are rounded where providers list them).
DISPUTE_TOLERANCE = 0.02


def undercuts(reported: float, table: float) -> bool:
    """Whether a reported cost is below its reported tokens at the price table, beyond rounding."""
    return reported < table * (1 - DISPUTE_TOLERANCE) - 1e-12


@dataclass(frozen=True)
class Reported:
    """A reply's usage as counted: ``usage`` holds only checked figures (``prompt_tokens``,
    ``completion_tokens``, ``cost``, where the reply gave them), ``odd`` one line per figure that
    was not a finite number >= 0 (``usage.cost 'n/a'``)."""

    usage: dict
    odd: tuple[str, ...] = ()


def reported_number(value: Any, whole: bool = False) -> tuple[float | int | None, bool]:
    """(the number, odd): ``None`` and not odd when absent; ``whole``: a token count (an int)."""
    if value is None:
        return None, False
    if isinstance(value, bool):
        return None, True
    number: float
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None, True
    else:
        return None, True
    if not math.isfinite(number) or number < 0 or (whole and not number.is_integer()):
        return None, True
    return (int(number) if whole else number), False


def _odd(where: str, value: Any) -> str:
    shown = repr(value)
    return f"{where} {shown[:40]}"


def reported_usage(usage: Any) -> Reported:
    """The checked figures of a reply's ``usage`` object (see the module docstring)."""
    if usage is None:
        return Reported({})
    if not isinstance(usage, dict):
        return Reported({}, (_odd("usage", usage),))
    checked: dict[str, Any] = {}
    odd: list[str] = []
    for name in COUNT_FIELDS:
        value, bad = reported_number(usage.get(name), whole=True)
        checked[name] = value
        if bad:
            odd.append(_odd(f"usage.{name}", usage.get(name)))
    details = usage.get("completion_tokens_details")
    if isinstance(details, dict) and "reasoning_tokens" in details:
        _, bad = reported_number(details["reasoning_tokens"], whole=True)
        if bad:  # inside completion_tokens: not counted apart, but an odd figure is named
            odd.append(_odd("usage.completion_tokens_details.reasoning_tokens", details["reasoning_tokens"]))
    cost, bad_cost = reported_number(usage.get("cost"))
    if bad_cost:
        odd.append(_odd("usage.cost", usage.get("cost")))
    upstream = None
    cost_details = usage.get("cost_details")
    if isinstance(cost_details, dict):
        upstream, bad_upstream = reported_number(cost_details.get("upstream_inference_cost"))
        if bad_upstream:
            odd.append(_odd("usage.cost_details.upstream_inference_cost", cost_details.get("upstream_inference_cost")))
    if cost is not None and not bad_cost and upstream:
        if usage.get("is_byok") is True or cost == 0:
            cost += upstream
    if cost is not None:
        checked["cost"] = float(cost)
    return Reported(checked, tuple(odd))
