"""``budget.*`` read into a :class:`~src.billing.ledger.Budget`: the caps, the ledger runs share.

The pipeline's ``run@`` stages name a sweep profile (``budget.sweep_file``) whose caps
(``sweep.max_cost_usd``, ``sweep.max_requests``) and profile name (the ledger) are read at run
time, not passed as stage params, so changing a cap never re-runs a finished stage. A Hydra
multirun with a cap and no ledger named shares one ledger per sweep folder. A sweep profile that
sets no ``sweep.max_cost_usd`` is named by :func:`uncapped_sweep`: a paid caller under it stops
(:func:`src.billing.session.paid_sweep_problem`). ``budget.price_max_age_days`` bounds the age of a
model file's price (:func:`src.billing.prices.price_age_warning`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from src.billing.ledger import Budget
from src.core.errors import ConfigError
from src.core.settings import load_sweep

KEYS = ("max_cost_usd", "max_requests", "ledger", "ledger_file", "stale_after_s", "sweep_file", "price_max_age_days")


def sweep_budget(path: Path) -> dict[str, Any]:
    """The caps of a sweep profile with the profile's name as the ledger."""
    sweep = load_sweep(path)
    return {"max_cost_usd": sweep.max_cost_usd, "max_requests": sweep.max_requests, "ledger": sweep.profile}


def uncapped_sweep(budget: Budget) -> tuple[str, str] | None:
    """(profile name, sweep file) when the budget's caps come from a sweep profile without
    ``sweep.max_cost_usd`` (a paid caller under it is refused); None otherwise (no sweep file,
    or a profile with a cap: the sweep file's cap is the one that holds)."""
    if budget.sweep_file is None or budget.max_cost_usd is not None:
        return None
    return budget.ledger or "unnamed", str(budget.sweep_file)


def price_max_age_days(value: Any) -> int:
    """``budget.price_max_age_days``: days a price block stays fresh (conf/config.yaml)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"budget.price_max_age_days: expected a whole number of days >= 0, got {value!r}")
    return value


def multirun_ledger() -> str | None:
    """The ledger a Hydra multirun's jobs share when none is named: one per sweep folder, so a
    cap holds for the whole sweep, whatever its launcher runs in parallel."""
    try:
        hydra_cfg = HydraConfig.get()
    except (ImportError, ValueError):  # not inside a Hydra job (the planner, a test)
        return None
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return None
    return f"multirun {Path(str(hydra_cfg.sweep.dir)).resolve()}"


def budget_from_mapping(block: dict[str, Any]) -> Budget:
    unknown = sorted(set(block) - set(KEYS))
    if unknown:
        raise ConfigError(f"budget.{unknown[0]}: no such setting (the settings: {', '.join(KEYS)})")
    block = dict(block)
    max_age = price_max_age_days(block.get("price_max_age_days"))
    sweep_file = Path(str(block["sweep_file"])) if block.get("sweep_file") else None
    if sweep_file is not None:
        block.update(sweep_budget(sweep_file))
    cost, requests, ledger = block.get("max_cost_usd"), block.get("max_requests"), block.get("ledger")
    if cost is not None and (
        isinstance(cost, bool) or not isinstance(cost, (int, float)) or not math.isfinite(cost) or cost < 0
    ):
        raise ConfigError(f"budget.max_cost_usd: expected a number of USD >= 0 or null, got {cost!r}")
    if requests is not None and (isinstance(requests, bool) or not isinstance(requests, int) or requests < 0):
        raise ConfigError(f"budget.max_requests: expected an integer >= 0 or null, got {requests!r}")
    if ledger is not None and (not isinstance(ledger, str) or not ledger.strip()):
        raise ConfigError(f"budget.ledger: expected a name or null, got {ledger!r}")
    stale = block.get("stale_after_s")
    if isinstance(stale, bool) or not isinstance(stale, (int, float)) or stale <= 0:
        raise ConfigError(f"budget.stale_after_s: expected a number of seconds > 0, got {stale!r}")
    if ledger is None and (cost is not None or requests is not None):
        ledger = multirun_ledger()
    path = block.get("ledger_file")
    if not path:
        raise ConfigError(f"budget.ledger_file: expected a file name, got {path!r}")
    return Budget(
        max_cost_usd=None if cost is None else float(cost),
        max_requests=requests,
        ledger=ledger,
        ledger_file=Path(str(path)),
        stale_after_s=float(stale),
        price_max_age_days=max_age,
        sweep_file=sweep_file,
    )
