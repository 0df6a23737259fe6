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

import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from src.billing.ledger import Budget
from src.billing.prices import DEFAULT_PRICE_MAX_AGE_DAYS
from src.core.errors import ConfigError

#: Keys DVC writes into a stage command as ``None`` when the sweep's value is null.
DVC_NULLABLE = ("max_cost_usd", "max_requests", "ledger")
KEYS = ("max_cost_usd", "max_requests", "ledger", "ledger_file", "stale_after_s", "sweep_file", "price_max_age_days")


def sweep_budget(path: Path) -> dict[str, Any]:
    """The caps of a sweep profile with the profile's name as the ledger."""

    try:
        sweep = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("sweep") or {}
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"budget.sweep_file: cannot read {path} ({error})") from None
    return {
        "max_cost_usd": sweep.get("max_cost_usd"),
        "max_requests": sweep.get("max_requests"),
        "ledger": str(sweep["profile"]) if sweep.get("profile") else None,
    }


def uncapped_sweep(block: dict[str, Any]) -> tuple[str, str] | None:
    """(profile name, sweep file) when ``budget.sweep_file`` names a profile without
    ``sweep.max_cost_usd`` (a paid caller under it is refused); None otherwise (no sweep file,
    or a profile with a cap: the sweep file's cap is the one that holds)."""
    path = block.get("sweep_file")
    if not path:
        return None
    caps = sweep_budget(Path(str(path)))
    if caps["max_cost_usd"] is not None:
        return None
    return caps["ledger"] or "unnamed", str(path)


def price_max_age_days(block: dict[str, Any]) -> int:
    """``budget.price_max_age_days``: days a price block stays fresh (default 90)."""
    value = block.get("price_max_age_days", DEFAULT_PRICE_MAX_AGE_DAYS)
    if value is None:
        return DEFAULT_PRICE_MAX_AGE_DAYS
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
    price_max_age_days(block)  # checked here, read where prices are shown
    block.pop("price_max_age_days", None)
    if block.get("sweep_file"):
        block.update(sweep_budget(Path(str(block["sweep_file"]))))
    cost, requests, ledger = (None if block.get(k) == "None" else block.get(k) for k in DVC_NULLABLE)
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
    return Budget(None if cost is None else float(cost), requests, ledger, Path(str(path)), float(stale))
