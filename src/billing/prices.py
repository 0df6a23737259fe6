"""A model's price per mode, and token counts of what is sent and received.

The price comes from the model file's ``price`` block (USD per million tokens, with the date it
was read and where): the list price for synchronous requests, and where the provider offers
them, ``batch`` (the Batch API) and ``flex`` (OpenAI's ``service_tier: flex``) prices. A mode
the block gives no price for is priced at the list price, an upper bound the plan names. A mode
block may instead name a provider's documented discount (``batch: {discount: openrouter}``,
:data:`DISCOUNTS`): the list price times that share, marked as a discount, not a price read.

A price has an age: a block ``read`` more than ``budget.price_max_age_days`` ago is named by
:func:`price_age_warning` in the plan and in a run's first lines (today comes from the clock,
or from ``$TEMPGEN_TODAY`` for tests).

Tokens are counted with the model's own tokenizer where it is on this machine (a llama.cpp
model's GGUF vocabulary, ``model.tokenizer`` already downloaded), else estimated at
characters / 4; :meth:`TokenCounter.bound` is a ceiling no tokenizer exceeds (a token is at
least one UTF-8 byte), which the in-run cap admits attempts under.
"""

from __future__ import annotations

import datetime
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from src.core.errors import ConfigError
from src.core.requests import ChatRequest

ESTIMATE = "estimate (characters / 4)"
TOKENIZER = "tokenizer"
MIXED = "tokenizer and estimate"
CHARS_PER_TOKEN = 4
#: Tokens a chat template may add per message (role markers, separators), over the bound.
TEMPLATE_TOKENS_PER_MESSAGE = 8
MODES = ("sync", "batch", "flex")
#: Documented per-provider discounts a price block may name for a mode instead of rates:
#: name -> (share of the list price, where it is documented). docs/cost.md cites the same pages.
DISCOUNTS: dict[str, tuple[float, str]] = {
    "openai": (0.5, "OpenAI's Batch API: 50% of the list price (platform.openai.com/docs/guides/batch)"),
    "openrouter": (0.5, "OpenRouter's Batch API: 50% of the list price (openrouter.ai/docs, Batch API guide)"),
}
#: The setting that bounds a price block's age (conf/config.yaml holds its value).
PRICE_AGE_SETTING = "budget.price_max_age_days"
#: An ISO date that stands in for today's (tests); unset: the clock.
TODAY_VARIABLE = "TEMPGEN_TODAY"


def cap_mode(mode: str) -> str:
    """The rates that bound an attempt's bill in ``mode``: OpenAI may serve a flex request at its
    standard tier (the reply's ``service_tier`` says which) and bills that at the list price, so
    the cap and the plan's ceiling hold a flex attempt at the list price."""
    return "sync" if mode == "flex" else mode


def billed_mode(mode: str, service_tier: object) -> str:
    """The mode a reply is priced in: flex only where the reply says flex served it, or says
    nothing of its tier (a provider that ignores the field)."""
    if mode == "flex" and isinstance(service_tier, str) and service_tier != "flex":
        return "sync"
    return mode


@dataclass(frozen=True)
class Price:
    """USD per million tokens, and when and where the figure was read.

    ``modes``: per-mode rates (``batch``, ``flex``) as (input, output) per million tokens;
    ``discounts``: the modes whose rates are a provider's documented discount (mode -> the
    discount's description), not a price read. ``mode``: the mode these rates are for;
    ``fallback`` says when a mode had no price of its own and the list price stands in for it.
    """

    input_per_mtok: float
    output_per_mtok: float
    read: str | None = None
    source: str | None = None
    modes: dict[str, tuple[float, float]] = field(default_factory=dict, compare=False)
    discounts: dict[str, str] = field(default_factory=dict, compare=False)
    mode: str = "sync"
    fallback: bool = False

    def cost(self, prompt_tokens: float, completion_tokens: float) -> float:
        return (prompt_tokens * self.input_per_mtok + completion_tokens * self.output_per_mtok) / 1e6

    def for_mode(self, mode: str) -> Price:
        """These rates in ``mode`` (the list price, marked ``fallback``, where the block has none)."""
        if mode == "sync":
            return replace(self, mode="sync", fallback=False)
        if mode in self.modes:
            rates = self.modes[mode]
            return replace(self, input_per_mtok=rates[0], output_per_mtok=rates[1], mode=mode, fallback=False)
        return replace(self, mode=mode, fallback=True)

    def describe(self) -> dict[str, Any]:
        """The plan's ``price`` block."""
        described = {
            "input_per_mtok": self.input_per_mtok,
            "output_per_mtok": self.output_per_mtok,
            "read": self.read,
            "source": self.source,
            "mode": self.mode,
            "list_price_for_mode": self.fallback,
        }
        if self.mode in self.discounts:
            described["discount"] = self.discounts[self.mode]
        return described

    def read_date(self) -> datetime.date | None:
        """The day the price was read: ``YYYY-MM-DD``, or ``YYYY-MM`` as the month's first day (a
        price read some day of that month is at least that old); None when unknown."""
        match = re.fullmatch(r"(\d{4})-(\d{1,2})(?:-(\d{1,2}))?", (self.read or "").strip())
        if match is None:
            return None
        try:
            return datetime.date(int(match[1]), int(match[2]), int(match[3] or 1))
        except ValueError:
            return None


def _rate(values: Any, key: str, where: str) -> float:
    value = values.get(key) if isinstance(values, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"{where}.{key}: expected a number >= 0 (USD per million tokens), got {value!r}")
    return float(value)


def price_from_block(block: Any, where: str = "model.price") -> Price:
    """A ``price`` block (plain dict) as a :class:`Price`; a bad value is a ConfigError naming its key.
    A mode block is rates (``input_per_mtok``, ``output_per_mtok``) or ``{discount: NAME}``, one of
    :data:`DISCOUNTS` applied to the list price."""
    if not isinstance(block, dict):
        raise ConfigError(f"{where}: expected a mapping with input_per_mtok and output_per_mtok, got {block!r}")
    list_in, list_out = _rate(block, "input_per_mtok", where), _rate(block, "output_per_mtok", where)
    modes, discounts = {}, {}
    for mode in MODES[1:]:
        entry = block.get(mode)
        if entry is None:
            continue
        if isinstance(entry, dict) and "discount" in entry:
            name = entry["discount"]
            if name not in DISCOUNTS or set(entry) != {"discount"}:
                raise ConfigError(f"{where}.{mode}.discount: expected one of {sorted(DISCOUNTS)} alone, got {entry!r}")
            share, documented = DISCOUNTS[name]
            modes[mode] = (list_in * share, list_out * share)
            discounts[mode] = f"a documented discount, not a price read: {documented}"
            continue
        modes[mode] = (
            _rate(entry, "input_per_mtok", f"{where}.{mode}"),
            _rate(entry, "output_per_mtok", f"{where}.{mode}"),
        )
    read, source = block.get("read"), block.get("source")
    return Price(
        list_in,
        list_out,
        read=None if read is None else str(read),
        source=None if source is None else str(source),
        modes=modes,
        discounts=discounts,
    )


def today() -> datetime.date:
    """Today's date: ``$TEMPGEN_TODAY`` (an ISO date, for tests) where set, else the clock."""
    value = os.environ.get(TODAY_VARIABLE)
    if value:
        try:
            return datetime.date.fromisoformat(value)
        except ValueError:
            raise ConfigError(f"${TODAY_VARIABLE}: expected a date YYYY-MM-DD, got {value!r}") from None
    return datetime.date.today()


def price_age_warning(
    model: str, price: Price | None, max_age_days: int | None, on: datetime.date | None = None
) -> str | None:
    """One line when ``model``'s price block was read more than ``max_age_days`` before ``on``
    (today), or says no date: providers change prices, and a stale one errs the bill and the cap
    alike. None for a fresh price, a model without a price to age (a local model) or no bound."""
    if (
        max_age_days is None
        or price is None
        or (price.input_per_mtok == 0 and price.output_per_mtok == 0 and not price.read)
    ):
        return None
    on = on or today()
    read = price.read_date()
    check = f"check its price on the provider's page and update model.price in conf/model/{model}.yaml"
    if read is None:
        return f"price of {model}: no read date (model.price.read); {check}"
    age = (on - read).days
    if age <= max_age_days:
        return None
    return (
        f"price of {model} read {price.read}, {age} days before {on.isoformat()} (more than "
        f"{PRICE_AGE_SETTING}={max_age_days}): {check}"
    )


class TokenCounter:
    """Tokens of a request or a text: exact where a tokenizer is at hand, else characters / 4."""

    def __init__(
        self,
        tokenize_completion: Callable[[ChatRequest], int] | None = None,
        tokenize_chat: Callable[[ChatRequest], int] | None = None,
        name: str = "",
        tokenize_text: Callable[[str], int] | None = None,
    ) -> None:
        self._completion = tokenize_completion
        self._chat = tokenize_chat
        self._text = tokenize_text
        self.name = name

    def count(self, request: ChatRequest) -> tuple[int, bool]:
        """(prompt tokens, exact)."""
        tokenize = self._completion if request.completion else self._chat
        if tokenize is not None:
            return tokenize(request), True
        return math.ceil(sum(len(content) for _, content in request.messages) / CHARS_PER_TOKEN), False

    def count_text(self, text: str) -> tuple[int, bool]:
        """(tokens of a generated text, exact)."""
        if self._text is not None:
            return self._text(text), True
        return math.ceil(len(text) / CHARS_PER_TOKEN), False

    def bound(self, request: ChatRequest) -> int:
        """Prompt tokens no tokenizer exceeds: the exact count where known, else the UTF-8 bytes
        plus a chat template's markers."""
        tokens, exact = self.count(request)
        if exact:
            return tokens
        size = sum(len(content.encode("utf-8")) for _, content in request.messages)
        return size + TEMPLATE_TOKENS_PER_MESSAGE * len(request.messages)
