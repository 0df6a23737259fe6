"""What the ``adv_p`` rewriter pays for: its plan, its paid session and its usage file.

An API generator (GPT-4.1 in the paper profile) is a paid caller like a prompted run
(:mod:`src.billing.session`): priced from its model file's ``price`` block, its ceiling (every
attempt of every instance not cached, each at its prompt's byte bound and ``max_tokens``)
reserved in the sweep's ledger (the profile's name, the profile's ``sweep.max_cost_usd``: the
sweep's cap covers the rewriting), every attempt admitted and billed by the session's meter, and
settled whatever happens. What it spent (billed retries counted, cached answers apart) is written
to ``history/derive/<task>/adv_p.json`` (:func:`usage_path`), beside the runs' history files,
never into a DVC output; a rerun after a stop, a kill or failed requests writes the whole
rewriting's spend there (the stopped processes' journals, :mod:`src.billing.earlier`).
``python -m src.plan --sweep`` prices the same requests (:func:`rewrite_plan`). A local
generator costs nothing and has no session.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from src.backends import options as backend_options
from src.backends.endpoint import API_BACKENDS
from src.billing.forecast import forecast_configuration
from src.billing.ledger import Budget
from src.billing.meter import Meter
from src.billing.prices import Price, TokenCounter, price_age_warning, price_from_block
from src.billing.session import PaidSession
from src.config.budget import budget_from_mapping, uncapped_sweep
from src.core.errors import ConfigError
from src.core.locate import conf_dir
from src.core.requests import ChatRequest
from src.core.settings import config_default, read_yaml
from src.data.schema import Record
from src.derive.rewrite_prompts import instance_kinds, rewrite_request

log = logging.getLogger(__name__)
#: The history folder the usage files go to, mirrored from a ``summaries/derive`` path.
USAGE_ROOT = Path("history") / "derive"
MODEL_CONFIG_DIR = conf_dir("model")  # the generators' files (--generator, sweep.adv_p_generator)


def model_config_path_of(generator: str) -> Path:
    """The ``conf/model`` file of the generator named ``generator``."""
    return MODEL_CONFIG_DIR / f"{generator}.yaml"


def read_model_file(path: Path) -> dict[str, Any]:
    """A ``conf/model`` file as Hydra composes it for ``src.run``: the defaults its
    ``/backend_options/NAME@options`` entry names (:data:`src.backends.options.GROUPS`) under the
    file's own ``options``; any other ``defaults`` entry is an error, not silently dropped."""
    config = read_yaml(path)
    defaults: dict[str, Any] = {}
    for entry in config.pop("defaults", None) or []:
        if entry == "_self_":
            continue
        group, _, package = str(entry).partition("@")
        name = group.removeprefix("/backend_options/")
        if package != "options" or name == group or name not in backend_options.GROUPS:
            raise ValueError(f"{path}: defaults entry {entry!r} is not /backend_options/NAME@options")
        defaults.update(backend_options.GROUPS[name]())
    config["options"] = {**defaults, **(config.get("options") or {})}
    return config


def rewrite_requests(
    records: Sequence[Record], max_attempts: int, seed: int, kinds: Sequence[str]
) -> list[ChatRequest]:
    """Every request the rewriter may send: each attempt of each instance, its kind as
    :func:`src.derive.adv_p.rewrite_records` cycles them (the ceiling: no rewrite accepted early)."""
    requests = []
    for record in records:
        order = instance_kinds(record.id, seed, tuple(kinds))
        requests += [rewrite_request(record, a, seed, order[a % len(order)]) for a in range(max_attempts)]
    return requests


def rewrite_plan(
    name: str, backend: Any, requests: Sequence[ChatRequest], price: Price | None, label: str = "adv_p"
) -> dict[str, Any]:
    """The plan of the rewrite requests through the cached ``backend``
    (:func:`src.billing.forecast.forecast_configuration`): cache hits are not sent, the cost is a ceiling."""
    return forecast_configuration(
        name,
        backend,
        [(label, list(requests))],
        price,
        TokenCounter(),
        mode=backend.mode,
        concurrency=backend.max_concurrency,
        min_tokens_per_s=backend.min_tokens_per_s,
    )


def generator_price(model_file: dict[str, Any], where: str) -> Price | None:
    """The ``price`` block of a generator's model file (None: none given)."""
    block = model_file.get("price")
    return None if block is None else price_from_block(block, f"{where}: price")


def is_paid(backend_name: str) -> bool:
    """Whether the generator is sent to an API endpoint someone bills (a local one is free)."""
    return backend_name in API_BACKENDS


def budget_block(sweep_file: str | Path, ledger_file: str | Path | None = None) -> dict[str, Any]:
    """``budget`` of conf/config.yaml with the sweep file whose caps and profile name (the ledger)
    hold for the rewriting, as for the pipeline's runs."""
    block = dict(config_default("budget"))
    block["sweep_file"] = str(sweep_file)
    if ledger_file is not None:
        block["ledger_file"] = str(ledger_file)
    return block


def start_session(
    name: str, generator: str, price: Price | None, backend: Any, requests: Sequence[ChatRequest], block: dict
) -> PaidSession:
    """The rewriter's paid session, its ceiling reserved (ConfigError: the one ``budget: ...`` line)
    and its meter the backend's. Logs the plan and the price's age first."""
    budget: Budget = budget_from_mapping(block)
    warning = price_age_warning(generator, price, budget.price_max_age_days)
    if warning:
        log.warning("%s", warning)
    plan = rewrite_plan(name, backend, requests, price)
    session = PaidSession(name, Meter(price, TokenCounter()), budget, sweep=uncapped_sweep(budget), keep_journal=True)
    ceiling = plan["ceiling_cost_usd"]
    log.info(
        "%s: %d requests at most, %d cached, %d to send (%s mode), ceiling %s",
        name,
        plan["requests"],
        plan["cached"],
        plan["to_send"],
        plan["mode"],
        "unknown (no price)" if ceiling is None else f"${ceiling:.6g}",
    )
    session.reserve(ceiling, int(plan["to_send"]))
    session.attach(backend)
    return session


def paid_session(
    args: Any, backend_name: str, config_path: Path | None, backend: Any, records: Sequence[Record], settings: Any
) -> PaidSession | None:
    """The session of ``python -m src.derive.adv_p`` (its ``args`` and ``RewriteSettings``),
    reserved; None for a local generator. A plan past the cap, or a paid generator under a
    profile without one, is one ``error: budget: ...`` line and exit 2, nothing sent."""
    if not is_paid(backend_name):
        return None
    model_file = read_model_file(config_path) if config_path is not None else {}
    generator = config_path.stem if config_path is not None else str(args.model_id)
    args.usage = args.usage or str(usage_path(args.output))
    try:
        price = generator_price(model_file, str(config_path))
        requests = rewrite_requests(records, settings.max_attempts, settings.seed, settings.kinds)
        block = budget_block(args.sweep, args.ledger_file)
        stage = f"adv_p {Path(args.output).parent.name} ({generator})"
        return start_session(stage, generator, price, backend, requests, block)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def stop_on_failures(errors: dict[str, int]) -> None:
    """A paid rewriter whose requests failed (the cap reached, the provider failing) stops with one
    line and writes no set: the rule fallback must not silently stand in for rewrites never
    received. A rerun completes from the response cache."""
    if not errors:
        return
    first = next(iter(sorted(errors, key=lambda e: (not e.startswith("budget:"), e))))
    count = sum(errors.values())
    print(
        f"error: adv_p: {count} rewrite request(s) failed ({first}); nothing written, rerun to complete them",
        file=sys.stderr,
    )
    raise SystemExit(1)


def usage_path(output: str | Path) -> Path:
    """``history/derive/<task>/<stem>.json`` for the output ``data/derived/<task>/<stem>.jsonl``."""
    output = Path(output)
    return USAGE_ROOT / output.parent.name / f"{output.stem}.json"


def write_usage(path: Path, session: PaidSession, backend: Any) -> Path:
    """The rewriter's spend as a history record (``usage``: the fields a run's usage has), read by
    the analysis beside the runs' history files; written also when the rewriting was interrupted."""
    price = session.meter.price
    record = {
        "stage": session.name,
        "generator": {"backend": backend.name, "model_id": backend.model_id},
        "ledger": session.budget.ledger,
        "price": None if price is None else price.for_mode("sync").describe(),
        "usage": session.usage(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    log.info("%s (%s)", session.spend_line(), path)
    return path
