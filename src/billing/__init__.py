"""Money: what a run will cost (plan), what each attempt cost (bill), and the caps (ledger, meter).

* :mod:`src.billing.bill` - one request's attempts, split by where each figure came from
  (provider-reported, price table, estimated); backends fill it;
* :mod:`src.billing.prices` - a model's prices per mode (sync, batch, flex) and token counting;
* :mod:`src.billing.meter` - a run's running spend and the cap each attempt is admitted under;
* :mod:`src.billing.ledger` - the spend ledger runs share: reservations under a lock, settled
  at the end, stale ones released by a stated rule.
"""
