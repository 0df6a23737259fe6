"""What the attempts of one request cost, and where each figure came from.

A provider bills every attempt it answered with a completion, also one the backend then threw
away and retried (a null content, a blank answer, two choices). Each such attempt is counted:
its tokens as the reply's ``usage`` reported them, else counted on this machine and marked
*estimated*; its cost as the reply's ``usage.cost`` (``cost_reported``), else the tokens at the
model file's price (``cost_price_table`` for reported tokens, ``cost_estimated`` for estimated
ones); a reported cost below the reply's own tokens at the price table is *disputed*: named,
counted in ``disputed_replies``, kept as reported and topped up to the table in ``cost_disputed``,
so the cap holds on the larger (it never trusts a figure that undercuts the tokens the provider
itself reported); a reply whose figures are odd (``true``, NaN, negative, ``"n/a"``) is priced the
same way and counted in ``odd_replies`` (:mod:`src.billing.reported`). An attempt that got no completion (an HTTP error, a timeout, a cut-off body, an HTML
page, an ``error`` object) is an ``unbilled`` attempt: providers do not bill it
(docs/cost.md names the sources).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

#: The fields of a bill, in the order usage reports list them.
BILL_FIELDS = (
    "attempts",
    "billed_attempts",
    "prompt_tokens",
    "completion_tokens",
    "estimated_prompt_tokens",
    "estimated_completion_tokens",
    "cost",
    "cost_reported",
    "cost_price_table",
    "cost_estimated",
    "cost_disputed",
    "odd_replies",
    "disputed_replies",
)


@dataclass(frozen=True)
class BilledReply:
    """What a billed reply said about itself: its ``usage`` (possibly empty or partial) and the
    text it generated (content, refusal, tool arguments, reasoning), to count when usage lacks it;
    ``service_tier``: the tier the reply says served it (OpenAI's flex may fall back to the standard tier);
    ``usage`` holds only checked figures, ``odd`` names the others."""

    usage: dict
    generated_text: str = ""
    service_tier: str | None = None
    odd: tuple[str, ...] = ()  # figures of its usage that were no finite number >= 0 (src/billing/reported.py)


@dataclass
class Bill:
    """The attempts of one request (or a sum of requests), priced.

    ``prompt_tokens`` and ``completion_tokens`` include the estimated ones; ``cost`` is the sum
    of the four costs (``cost_disputed``: the excess of disputed replies' tokens at the table over
    what they reported, counted against the cap).
    """

    attempts: int = 0
    billed_attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated_prompt_tokens: int = 0
    estimated_completion_tokens: int = 0
    cost_reported: float = 0.0
    cost_price_table: float = 0.0
    cost_estimated: float = 0.0
    cost_disputed: float = 0.0  # what a disputed reply's tokens at the table add above its reported cost
    odd_replies: int = 0  # billed replies with an odd figure, priced as if they had not said it
    disputed_replies: int = 0  # billed replies whose reported cost fell below their tokens at the price table

    @property
    def cost(self) -> float:
        return self.cost_reported + self.cost_price_table + self.cost_estimated + self.cost_disputed

    @property
    def unbilled_attempts(self) -> int:
        return self.attempts - self.billed_attempts

    def add(self, other: Bill) -> Bill:
        for name in (f.name for f in fields(self)):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self

    def as_dict(self) -> dict[str, float]:
        values = {**asdict(self), "cost": self.cost}
        return {name: float(values[name]) for name in BILL_FIELDS}

    @classmethod
    def of_tokens(cls, prompt_tokens: int, completion_tokens: int, cost: float, reported_cost: bool) -> Bill:
        """One billed attempt whose tokens were reported (a local engine's own count, or a reply's usage)."""
        return cls(
            attempts=1,
            billed_attempts=1,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_reported=cost if reported_cost else 0.0,
            cost_price_table=0.0 if reported_cost else cost,
        )
