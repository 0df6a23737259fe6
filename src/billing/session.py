"""A paid session: one caller of a paid endpoint, from its price to its settled spend.

Every caller that sends requests someone pays for (a prompted run, the ``adv_p`` rewriter, the k
tuning) goes through the same steps, so the cap and the bill hold for each the same way:

1. **the price**: the model file's ``price`` block (:mod:`src.billing.prices`), its age checked
   (:func:`~src.billing.prices.price_age_warning`, logged first);
2. **the reservation**: the plan's ceiling reserved in the budget's ledger
   (:func:`src.billing.ledger.reserve`) before the first request; a plan past a cap, or a paid
   sweep profile without ``sweep.max_cost_usd``, is one ``budget: ...`` line
   (:class:`~src.core.errors.ConfigError`) and nothing is sent;
3. **the admission**: the session's :class:`~src.billing.meter.Meter` is the backend's, so every
   attempt (retries included) is admitted within the reservation and priced when it lands;
4. **the settle**: whatever happens (finished, failed, Ctrl-C, SIGTERM) the reservation becomes
   one ledger entry of what was spent (:meth:`PaidSession.settle`, idempotent);
5. **the usage**: every attempt sent, billed retries included, and answers served from the
   response cache counted apart, never as new spend (:meth:`PaidSession.usage`). A caller that
   resumes (``keep_journal``: the ``adv_p`` rewriter) hands its results to :meth:`PaidSession.count`:
   an answer an earlier, stopped process of the same caller bought counts at that process's bill
   (:mod:`src.billing.earlier`), not as a free cached answer, until a complete run drops those
   journals (:meth:`PaidSession.completed`).

Use::

    session = PaidSession("adv_p timex", Meter(price, counter), budget, sweep=uncapped_sweep(budget))
    session.reserve(plan["ceiling_cost_usd"], plan["to_send"])   # ConfigError: one line, exit 2
    session.attach(backend)
    with session:                                                 # settles on any exit
        ...
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Sequence
from typing import Any

from src.billing.bill import BILL_FIELDS, Bill
from src.billing.earlier import EarlierAttempts
from src.billing.ledger import Budget, Reservation, journals_folder, reserve, usd
from src.billing.meter import Meter
from src.core.errors import ConfigError

log = logging.getLogger(__name__)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be, so the same ``finally`` settles the ledger."""


def paid_sweep_problem(sweep: tuple[str, str] | None, name: str, ceiling: float | None, to_send: int) -> str | None:
    """The one line a paid caller of an uncapped sweep profile stops with, else None.

    ``sweep``: (profile name, sweep file) of a profile that sets no ``sweep.max_cost_usd``
    (:func:`src.config.budget.uncapped_sweep`); paid: a priced plan with a ceiling above 0."""
    if sweep is None or not to_send or not ceiling:
        return None
    profile, path = sweep
    return (
        f"budget: profile {profile!r} sends paid requests and sets no cap: {name} alone would cost up to "
        f"{usd(ceiling)} ({to_send} requests); set sweep.max_cost_usd in {path} (the whole profile's ceiling: "
        f"python -m src.plan --sweep {path})"
    )


class PaidSession:
    """The price, reservation, admission, settle and usage of one caller (see the module doc).

    ``name``: what the ledger entry and the lines call it; ``meter``: priced with the model's
    price and token counter; ``budget``: the caps and ledger; ``sweep``: the profile and file of
    an uncapped sweep (a paid session under it is refused)."""

    def __init__(
        self,
        name: str,
        meter: Meter,
        budget: Budget,
        sweep: tuple[str, str] | None = None,
        keep_journal: bool = False,
        scope: str | None = None,
    ) -> None:
        self.name = name
        self.scope = scope or name  # whose carried journals it reads and leaves (a run: its name and key)
        self.meter = meter
        self.budget = budget
        self.sweep = sweep
        self.keep_journal = keep_journal  # its next process counts it (src/billing/earlier.py)
        self.reservation: Reservation | None = None
        self.cached = 0  # answers the caller took from the response cache (bought before, not now)
        self.earlier = EarlierAttempts([])  # what stopped processes of this caller were billed (keep_journal)
        self.earlier_bill = Bill()  # ... for the requests this process took from them
        self.earlier_sent = 0  # requests an earlier process bought whose cached answer this one used
        self.notes: list[str] = []
        self._settled = False
        self._previous_sigterm: Any = None

    # ----- before the first request ---------------------------------------------------------------

    def reserve(self, ceiling_cost: float | None, to_send: int, batches: Sequence[str] = ()) -> Reservation:
        """Reserve the plan's ceiling and hand the reservation to the meter; ConfigError (the
        ``budget: ...`` line) when it does not fit, or when the sweep has no cap for a paid plan.
        ``batches``: keys of the caller's batches in flight (their holds join the reservation)."""
        problem = paid_sweep_problem(self.sweep, self.name, ceiling_cost, to_send)
        if problem:
            raise ConfigError(problem)
        self.reservation = reserve(self.budget, self.name, ceiling_cost, int(to_send), batches, self.scope)
        for note in self.reservation.notes:
            log.warning("%s", note)
        self.meter.reservation = self.reservation
        if self.keep_journal:  # after reserve: it carried the journal of a killed process of this caller
            self.earlier = EarlierAttempts.of_run(journals_folder(self.budget), self.scope)
        return self.reservation

    def attach(self, backend: Any) -> None:
        """Make the session's meter the one ``backend`` (or the backend a cache wraps) admits and
        prices every attempt with."""
        backend.attach_meter(self.meter)

    # ----- the end ---------------------------------------------------------------------------------

    def count(self, results: Sequence[Any]) -> None:
        """Count a batch of generation results: an answer from the response cache is free, unless an
        earlier process of this caller was billed for its request (then it was sent, at that bill);
        attempts earlier processes made for a request sent again now are added to the spend."""
        for result in results:
            before = self.earlier.take(result.request)
            if before is None:
                self.cached += bool(result.cached)
                continue
            self.earlier_bill.add(before)
            self.earlier_sent += bool(result.cached)

    def completed(self) -> None:
        """The caller finished: its usage has counted the earlier processes' journals, so drop them
        and this process's own (a later rerun reports its answers as cached). Call after settle."""
        self.earlier.drop(also=None if self.reservation is None else self.reservation.carried)

    def settle(self) -> None:
        """Replace the reservation by one entry of what was spent (once; later calls do nothing)."""
        if self._settled or self.reservation is None:
            return
        self._settled = True
        notes = self.reservation.settle(self.meter.spend())
        for note in notes or ():
            (log.error if note == self.reservation.unsettled else log.warning)("%s", note)
        if not self.keep_journal and self.reservation.carried is not None:
            self.reservation.carried.unlink(missing_ok=True)  # nobody resumes its usage from it

    def __enter__(self) -> PaidSession:
        if threading.current_thread() is threading.main_thread():
            self._previous_sigterm = signal.signal(signal.SIGTERM, _raise_terminated)
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self.settle()
        finally:
            if self._previous_sigterm is not None:
                signal.signal(signal.SIGTERM, self._previous_sigterm)
                self._previous_sigterm = None

    # ----- what was spent --------------------------------------------------------------------------

    def usage(self) -> dict[str, float]:
        """What this session sent and spent: every attempt (``attempts``, billed retries included in
        ``billed_attempts`` and the cost), the new requests, and the answers the response cache
        served (``cached``), which cost nothing now. The fields are :data:`~src.billing.bill.BILL_FIELDS`
        plus ``requests``, ``sent``, ``cached`` and ``retried``, as a run's usage names them."""
        total = Bill().add(self.meter.total).add(self.earlier_bill).as_dict()
        sent = float(self.meter.requests + self.earlier_sent)
        usage = {"requests": sent + self.cached, "sent": sent, "cached": float(self.cached)}
        usage.update({name: total[name] for name in BILL_FIELDS})
        usage["retried"] = max(0.0, usage["attempts"] - sent)
        return usage

    def spend_line(self) -> str:
        """One line: what was spent, against the reservation."""
        usage = self.usage()
        reserved = "" if self.reservation is None else f" (reserved {usd(self.reservation.cost_usd)})"
        return (
            f"{self.name}: spent {usd(usage['cost'])}{reserved}: {int(usage['billed_attempts'])} billed attempts of "
            f"{int(usage['attempts'])} for {int(usage['sent'])} requests, {int(usage['cached'])} answers from the cache"
        )


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated


__all__ = ["PaidSession", "Terminated", "paid_sweep_problem"]
