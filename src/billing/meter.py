"""A run's spend as its attempts land, and the cap each attempt is admitted under.

The HTTP backend asks :meth:`Meter.admit` before every attempt and hands the reply to
:meth:`Meter.settle` after it. An attempt is admitted only when what the run has spent, plus
the ceiling of every attempt in flight, plus this attempt's ceiling stays within the run's
allowance (its ledger reservation, :mod:`src.billing.ledger`): an attempt's ceiling is its
prompt at :meth:`~src.billing.prices.TokenCounter.bound` tokens and an answer of ``max_tokens``,
at the mode's price, so no reply can cost more than was admitted (as long as the model file's
price is not below the provider's). When an attempt does not fit, the backend waits for the
attempts in flight to settle; with none in flight the meter asks the ledger to extend the
reservation within the cap, and when it cannot, the run stops sending (``budget: ...``).

Settling prices the attempt (:class:`~src.billing.bill.Bill`): tokens as reported, else at
the bound the attempt was admitted under (its prompt's tokenizer count or UTF-8 bytes plus
template markers, its answer at ``max_tokens``) and marked estimated; cost as reported, else at
the price table; a reported cost below the reply's reported tokens at the price table (``usage.cost:
0`` beside 5,000 prompt tokens) is disputed: named, kept as reported, and the difference counted
in ``cost_disputed``, so the cap holds on the larger. A reply's odd figures (:mod:`src.billing.reported`) count as not reported.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from dataclasses import dataclass

from src.billing.bill import Bill, BilledReply
from src.billing.ledger import Reservation, usd
from src.billing.prices import Price, TokenCounter, billed_mode, cap_mode
from src.billing.reported import undercuts
from src.core.digest import digest
from src.core.requests import ChatRequest

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Admission:
    """One admitted attempt: its request, its ceiling, whether it is the request's first, the
    mode it is sent in (its price), and whether this process admitted it under a ceiling
    (``held``; False: an attempt an earlier process sent, see :meth:`Meter.already_sent`)."""

    request: ChatRequest
    ceiling: float
    first: bool
    mode: str = "sync"
    held: bool = True


def request_digest(request: ChatRequest) -> str:
    """A request's identity in a journal (what it asks, not the caller's label)."""
    fields = {k: v for k, v in dataclasses.asdict(request).items() if k != "request_id"}
    return digest(json.dumps(fields, sort_keys=True, default=str), 24)


def journal_detail(bill: Bill, admission: Admission) -> dict:
    """What a journal line says of an attempt beside its cost: enough to count it again later
    (its request's digest, mode, tokens, whether billed and how the cost was known)."""
    return {
        "request": request_digest(admission.request),
        "mode": admission.mode,
        "billed": bill.billed_attempts,
        "prompt_tokens": bill.prompt_tokens,
        "completion_tokens": bill.completion_tokens,
        "cost_reported": bill.cost_reported,
        "cost_price_table": bill.cost_price_table,
        "cost_estimated": bill.cost_estimated,
        "estimated_prompt_tokens": bill.estimated_prompt_tokens,
        "estimated_completion_tokens": bill.estimated_completion_tokens,
        "cost_disputed": bill.cost_disputed,
        "odd_replies": bill.odd_replies,
        "disputed_replies": bill.disputed_replies,
    }


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class Meter:
    """Prices attempts and holds a run within its allowance (thread-safe).

    ``price``: the model's price, with its per-mode rates (None: unknown, costs count as 0 and
    no cost cap can be set); ``reservation``: the run's claim on its ledger (None: no cap).
    """

    def __init__(
        self, price: Price | None = None, counter: TokenCounter | None = None, reservation: Reservation | None = None
    ) -> None:
        self.price = price
        self.counter = counter or TokenCounter()
        self.reservation = reservation
        self.total = Bill()
        self.requests = 0  # new requests admitted (their first attempt)
        self.in_flight = 0
        self._in_flight_cost = 0.0
        self._lock = threading.Lock()

    def mode_price(self, mode: str) -> Price | None:
        return None if self.price is None else self.price.for_mode(mode)

    def ceiling(self, request: ChatRequest, mode: str = "sync") -> float:
        """The most one attempt of ``request`` can cost in ``mode`` (flex at the list price: see
        :func:`~src.billing.prices.cap_mode`)."""
        price = self.mode_price(cap_mode(mode))
        if price is None:
            return 0.0
        return price.cost(self.counter.bound(request), request.max_tokens)

    def admit(self, request: ChatRequest, first: bool, mode: str = "sync") -> Admission | None:
        """Admit one attempt, or None when it does not fit the allowance now, or when the run's
        lease was released (then :meth:`exhausted` names that)."""
        ceiling = self.ceiling(request, mode)
        if self.reservation is not None and self.reservation.check() is not None:
            return None
        with self._lock:
            cost_cap, request_cap = self.reservation.allowance() if self.reservation else (None, None)
            if cost_cap is not None and self.total.cost + self._in_flight_cost + ceiling > cost_cap + 1e-12:
                return None
            if first and request_cap is not None and self.requests + 1 > request_cap:
                return None
            self.in_flight += 1
            self._in_flight_cost += ceiling
            self.requests += first
        return Admission(request, ceiling, first, mode)

    def already_sent(self, request: ChatRequest, first: bool, mode: str = "sync") -> Admission:
        """Count an attempt an earlier process already sent (a line of a batch it left in flight)
        whose room under the cap is gone: nothing is sent, but its bill is real and is counted when
        it settles. Only for lines no hold in the ledger covers (docs/cost.md)."""
        with self._lock:
            self.in_flight += 1
            self.requests += first
        return Admission(request, 0.0, first, mode, held=False)

    def extend_for(self, request: ChatRequest, first: bool, mode: str = "sync") -> bool:
        """Grow the reservation so that one more attempt of ``request`` fits (False: the cap is reached)."""
        if self.reservation is None:
            return True
        with self._lock:
            spent_cost, spent_requests = self.total.cost + self._in_flight_cost, self.requests
        return self.reservation.extend(spent_cost, spent_requests, self.ceiling(request, mode), int(first))

    def exhausted(self, request: ChatRequest | None = None, mode: str = "sync") -> str:
        """The one line a run stops with when the cap leaves no room for the next attempt."""
        if self.reservation is not None and self.reservation.lost is not None:
            return self.reservation.lost
        budget = self.reservation.budget if self.reservation else None
        where = f" (ledger {budget.ledger!r})" if budget and budget.ledger else ""
        caps = []
        if budget and budget.max_cost_usd is not None:
            caps.append(f"budget.max_cost_usd={budget.max_cost_usd:g}")
        if budget and budget.max_requests is not None:
            caps.append(f"budget.max_requests={budget.max_requests}")
        next_attempt = ""
        if request is not None and self.price is not None:
            next_attempt = f" (it could cost up to {usd(self.ceiling(request, mode))})"
        return (
            f"budget: stopped sending at {usd(self.total.cost)} spent and {self.requests} requests by this run{where}: "
            f"the next attempt does not fit {' and '.join(caps) or 'the cap'}{next_attempt}; raise the cap and rerun "
            "(answers so far are cached)"
        )

    def settle(self, admission: Admission, billed: BilledReply | None) -> Bill:
        """The attempt's bill (``billed`` None: no completion came back, nothing billed)."""
        bill = self.price_attempt(admission.request, billed, admission.mode)
        # an attempt an earlier process sent has no ceiling here (0): nothing to compare with
        if admission.held and bill.cost_reported > admission.ceiling + 1e-12 and self.price is not None:
            logger.warning(
                "request %r: the provider reported %s for one attempt, above its admitted ceiling %s "
                "(is the model file's price below the provider's?)",
                admission.request.request_id,
                usd(bill.cost_reported),
                usd(admission.ceiling),
            )
        with self._lock:
            self.in_flight -= 1
            self._in_flight_cost -= admission.ceiling
            self.total.add(bill)
        if self.reservation is not None:
            self.reservation.record(bill.cost, int(admission.first), 1, **journal_detail(bill, admission))
        return bill

    def release(self, admission: Admission) -> None:
        """Give back an admission whose attempt was not sent (or not counted: a refused schema form)."""
        with self._lock:
            self.in_flight -= 1
            self._in_flight_cost -= admission.ceiling
            self.requests -= admission.first

    def price_attempt(self, request: ChatRequest, billed: BilledReply | None, mode: str = "sync") -> Bill:
        """One attempt priced: reported figures where the reply has them, else counted here."""
        bill = Bill(attempts=1)
        if billed is None:
            return bill
        bill.billed_attempts = 1
        usage = billed.usage or {}
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        # Estimates at the bound the attempt was admitted under, never below the truth: the prompt
        # at its tokenizer count or UTF-8 bytes plus template markers, the answer at max_tokens
        # (hidden reasoning tokens are billed too and no text shows them).
        if not _is_count(prompt):
            prompt = bill.estimated_prompt_tokens = self.counter.bound(request)
        if not _is_count(completion):
            completion = bill.estimated_completion_tokens = request.max_tokens
        if billed.odd:
            bill.odd_replies = 1
            logger.warning(
                "request %r: odd figures in the reply's usage (%s): priced as if it had not said them",
                request.request_id,
                "; ".join(billed.odd),
            )
        bill.prompt_tokens, bill.completion_tokens = int(prompt), int(completion)
        cost = usage.get("cost")
        price = self.mode_price(billed_mode(mode, billed.service_tier))
        reported_prompt = bill.prompt_tokens - bill.estimated_prompt_tokens
        reported_completion = bill.completion_tokens - bill.estimated_completion_tokens
        if isinstance(cost, (int, float)) and not isinstance(cost, bool):
            bill.cost_reported = float(cost)
            table = None if price is None else price.cost(reported_prompt, reported_completion)
            if table is not None and undercuts(bill.cost_reported, table):
                bill.disputed_replies = 1
                bill.cost_disputed = table - bill.cost_reported
                logger.warning(
                    "request %r: the provider reported %s for the %d prompt and %d completion tokens it "
                    "reported, below their %s at the model file's price: the cap counts the larger",
                    request.request_id,
                    usd(bill.cost_reported),
                    reported_prompt,
                    reported_completion,
                    usd(table),
                )
        elif price is not None:
            bill.cost_price_table = price.cost(reported_prompt, reported_completion)
            bill.cost_estimated = price.cost(bill.estimated_prompt_tokens, bill.estimated_completion_tokens)
        return bill

    def add_local(self, bill: Bill | None, attempts: int) -> None:
        """Count a request a local engine answered (``bill`` None: it failed): no admission, no cap
        in flight, but the ledger's request count and the journal see it."""
        bill = bill or Bill(attempts=attempts)
        with self._lock:
            self.total.add(bill)
            self.requests += 1
        if self.reservation is not None:
            self.reservation.record(bill.cost, 1, bill.attempts)

    def spend(self) -> dict[str, float]:
        """What the ledger's entry of this run records."""
        return {**self.total.as_dict(), "cost_usd": self.total.cost, "requests": self.requests}
