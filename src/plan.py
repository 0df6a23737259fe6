"""Plan and price runs before spending: ``python -m src.plan <the overrides of src.run>``.

Per configuration and in total: requests, identical prompts (sent once), answers already
cached, requests left to send, their prompt tokens (the model's tokenizer where it is on this
machine, else an estimate the output names), the output-token ceiling (every answer at its
``max_tokens``) and the price from the model file's ``price`` block, in the run's mode; then for
the total, per mode (``sync``, ``batch``, ``flex``) the cost at most and the wait. Nothing is sent, no model
is loaded (a llama.cpp model's vocabulary at most) and no MLflow run is opened.

``model=a,b strategy=I,D`` plans every combination, as a Hydra multirun would run them;
``--sweep sweep.yaml`` plans every configuration the pipeline's ``run@`` stages run, with the
overrides those stages pass, from the profile's own settings: derived sets not built for the
profile are estimated from the base sets and ``sweep.derive_limit`` (and named), and an API
``adv_p`` generator's rewriting has lines of its own (:mod:`src.planning.profile`). The budget
(``budget.*``, as a run checks it) is shown against the total; a paid profile without
``sweep.max_cost_usd`` is named (its runs refuse to start). A price read more than
``budget.price_max_age_days`` ago is named. ``--json PATH`` writes the whole plan, the same
object each run logs as ``plan.json``.

The printed plan is a list of sections (:func:`sections`), each a function of the
:class:`PlanResult` returning its lines: a new section is one entry there.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser

from src.billing.ledger import spent, usd
from src.billing.prices import MODES, price_age_warning, today
from src.cli import setup_logging
from src.config.overrides import override_error
from src.config.profile import configurations
from src.config.schema import RunConfig
from src.core.settings import SweepProfile
from src.planning.power import power_beside_cost
from src.runs.configure import plan_of
from src.runs.offline import load_config, offline_system

TOTAL_KEYS = (
    "requests",
    "duplicates",
    "cached",
    "to_send",
    "prompt_tokens",
    "prompt_token_bound",
    "output_token_ceiling",
)


def expand(overrides: Sequence[str]) -> list[list[str]]:
    """Every combination of the sweep overrides (``model=a,b``), in Hydra's multirun order."""
    choices = []
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        if override.is_sweep_override():
            key = override.get_key_element()
            choices.append([f"{key}={value}" for value in override.sweep_string_iterator()])
        else:
            choices.append([override.input_line])
    return [list(combination) for combination in itertools.product(*choices)]


def sweep_configurations(path: Path, extra: Sequence[str]) -> list[list[str]]:
    """The overrides of every ``run@`` stage of the sweep profile at ``path`` (plus ``extra``):
    the profile's own overrides (:mod:`src.config.profile`, as the stage's run reads them)."""
    return [[*configuration, *extra] for configuration in configurations(path)]


def plan_one(overrides: Sequence[str], seen: set[str] | None = None) -> tuple[dict[str, Any], RunConfig]:
    """(plan, typed config) of one configuration; ValueError names what cannot run. ``seen``: the
    request keys of the sweep's earlier configurations (sent once, whichever asks first)."""
    config = load_config(overrides)
    system, plans = offline_system(config)
    plan = plan_of(config, system, plans, seen)
    plan["overrides"] = list(overrides)
    return plan, config


def money(value: float | None) -> str:
    return "price unknown" if value is None else usd(value)


def describe(plan: dict[str, Any]) -> str:
    """One configuration (or the total) on one line."""
    price = plan.get("price")
    if plan.get("configuration") == "total":
        priced = ""
    elif price is None:
        priced = "; no price block in the model file"
    else:
        read = f"read {price['read']}" if price.get("read") else "no date"
        stand_in = (
            ", the list price: the model file has no price for this mode" if price.get("list_price_for_mode") else ""
        )
        if price.get("discount"):
            stand_in = f"; {price['discount']}"
        priced = (
            f"; {price.get('mode', 'sync')} price ${price['input_per_mtok']:g} in / ${price['output_per_mtok']:g} out "
            f"per Mtok ({read}, {price.get('source') or 'no source'}{stand_in})"
        )
    return (
        f"{plan['configuration']}: {plan['requests']:,} requests, {plan['duplicates']:,} identical prompts, "
        f"{plan['cached']:,} cached, {plan['to_send']:,} to send; prompt tokens {plan['prompt_tokens']:,} "
        f"by {plan['prompt_tokens_counted_by']}{bound_note(plan)}; output ceiling "
        f"{plan['output_token_ceiling']:,} tokens; cost at most {money(plan['ceiling_cost_usd'])} (prompts "
        f"{money(plan['prompt_cost_usd'])}, output ceiling {money(plan['output_ceiling_cost_usd'])}){priced}"
    )


def bound_note(plan: dict[str, Any]) -> str:
    """Where prompts were estimated, the bound the cost ceiling counts them at."""
    if plan["prompt_token_bound"] == plan["prompt_tokens"]:
        return ""
    return f", at most {plan['prompt_token_bound']:,} (one token per byte)"


def total_of(plans: list[dict[str, Any]]) -> dict[str, Any]:
    total: dict[str, Any] = {"configuration": "total", **{key: sum(p[key] for p in plans) for key in TOTAL_KEYS}}
    methods = {p["prompt_tokens_counted_by"] for p in plans if p["to_send"]}
    total["prompt_tokens_counted_by"] = (
        methods.pop() if len(methods) == 1 else ("tokenizer and estimate" if methods else "none to send")
    )
    for key in ("prompt_cost_usd", "output_ceiling_cost_usd", "ceiling_cost_usd"):
        values = [p[key] for p in plans if p["to_send"]]
        total[key] = None if any(v is None for v in values) else float(sum(values))
    total["modes"] = {}
    for mode in MODES:
        rows = [p["modes"][mode] for p in plans if p["to_send"]]
        costs = [row["ceiling_cost_usd"] for row in rows]
        at_rates = [row["at_mode_rates_usd"] for row in rows]
        total["modes"][mode] = {
            "ceiling_cost_usd": None if any(c is None for c in costs) else float(sum(costs)),
            "at_mode_rates_usd": None if any(c is None for c in at_rates) else float(sum(at_rates)),
            "list_price_stands_in": any(row["list_price_stands_in"] for row in rows),
            "documented_discount": any(row.get("documented_discount") for row in rows),
            "configurations": len(rows),
            "waits": sorted({row["wait"] for row in rows}),
        }
    return total


def mode_lines(total: dict[str, Any]) -> list[str]:
    """Per mode, what the whole plan would cost and how long it may take."""
    lines = []
    for mode, row in total.get("modes", {}).items():
        stand_in = (
            " (the list price stands in where a model file has no price for it)" if row["list_price_stands_in"] else ""
        )
        if row.get("documented_discount"):
            stand_in += " (a provider's documented discount where a model file has no rates for it: docs/cost.md)"
        waits = "; ".join(row["waits"]) or "nothing to send"
        served = ""
        if row["at_mode_rates_usd"] != row["ceiling_cost_usd"]:  # flex: the standard tier may serve it
            served = f", {money(row['at_mode_rates_usd'])} where every reply is served at {mode} rates"
        lines.append(f"  {mode}: cost at most {money(row['ceiling_cost_usd'])}{served}{stand_in}; wait: {waits}")
    return ["by mode (model.options.mode; docs/cost.md):", *lines] if lines else []


def budget_line(config: RunConfig, total: dict[str, Any]) -> str | None:
    """The budget of the (first) configuration against the total, as the runs will check it."""
    budget = config.budget
    if budget.max_cost_usd is None and budget.max_requests is None:
        return None
    already = spent(budget)
    held_requests = already["requests"] + already["reserved_requests"]
    held_cost = already["cost_usd"] + already["reserved_cost_usd"]
    reserved = " (reserved by runs in progress included)" if already["reserved_requests"] else ""
    parts = []
    if budget.max_requests is not None:
        verdict = "fits" if held_requests + total["to_send"] <= budget.max_requests else "EXCEEDS"
        parts.append(
            f"{total['to_send']:,} requests + {held_requests:,} sent before{reserved} {verdict} "
            f"budget.max_requests={budget.max_requests}"
        )
    if budget.max_cost_usd is not None:
        ceiling = total["ceiling_cost_usd"]
        verdict = "unknown" if ceiling is None else "fits" if held_cost + ceiling <= budget.max_cost_usd else "EXCEEDS"
        parts.append(
            f"{money(ceiling)} + {money(held_cost)} spent before{reserved} {verdict} "
            f"budget.max_cost_usd={budget.max_cost_usd:g}"
        )
    ledger = f" (ledger {budget.ledger!r}, {already['runs']} runs)" if budget.ledger else ""
    return "budget" + ledger + ": " + "; ".join(parts) + " (each run stops before its first request past a cap)"


@dataclass
class PlanResult:
    """Everything planned: the configurations, the profile's other paid stages (the rewriting), the
    total over both, the first configuration (its budget), the profile (``--sweep``) and notes."""

    plans: list[dict[str, Any]]
    stages: list[dict[str, Any]]
    total: dict[str, Any]
    config: RunConfig | None
    profile: SweepProfile | None = None
    profile_file: Path | None = None
    notes: list[str] = field(default_factory=list)
    prices: dict[str, Any] = field(default_factory=dict)  # model name -> Price, of every priced plan


def configuration_lines(result: PlanResult) -> list[str]:
    return [describe(plan) for plan in result.plans]


def stage_lines(result: PlanResult) -> list[str]:
    """The profile's rewriting: requests (every attempt of every instance), tokens and cost."""
    return [describe(plan) for plan in result.stages]


def total_lines(result: PlanResult) -> list[str]:
    return [*result.notes, describe(result.total), *mode_lines(result.total)]


def power_lines(result: PlanResult) -> list[str]:
    """Power beside cost: per dataset, the instances needed to detect the analysis' margin, from a
    pilot's evidence (docs/scoring.md)."""
    return power_beside_cost(result.plans)


def price_age_lines(result: PlanResult) -> list[str]:
    """A warning per price read more than ``budget.price_max_age_days`` ago (or undated)."""
    if result.config is None:
        return []
    days, on = result.config.budget.price_max_age_days, today()
    warnings = [price_age_warning(name, price, days, on) for name, price in sorted(result.prices.items())]
    return [f"warning: {line}" for line in warnings if line]


def budget_lines(result: PlanResult) -> list[str]:
    line = None if result.config is None else budget_line(result.config, result.total)
    return [line] if line else []


def uncapped_lines(result: PlanResult) -> list[str]:
    """A paid profile without a cap: its ceiling and the setting its runs wait for."""
    if result.profile is None or result.profile.max_cost_usd is not None:
        return []
    ceiling = result.total.get("ceiling_cost_usd")
    if not ceiling or not result.total.get("to_send"):
        return []
    mode = result.profile.mode
    return [
        f"budget: profile {result.profile.profile!r} sends paid requests and sets no cap: its plan's ceiling "
        f"is {money(ceiling)} (sweep.mode: {mode}); set sweep.max_cost_usd in {result.profile_file} "
        "(its paid stages refuse to start without it)"
    ]


#: The printed plan, section by section (each a function of the :class:`PlanResult`): a new one is
#: one entry here.
SECTIONS: list[Callable[[PlanResult], list[str]]] = [
    configuration_lines,
    stage_lines,
    total_lines,
    power_lines,
    price_age_lines,
    budget_lines,
    uncapped_lines,
]


def sections(result: PlanResult) -> list[str]:
    return [line for section in SECTIONS for line in section(result)]


def plan_sweep_stages(args: argparse.Namespace, first: RunConfig) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The profile's rewriting plans and the prices of its generator (empty without ``--sweep``)."""
    if args.sweep is None:
        return [], {}
    import src.planning.profile as profile_plan  # loads the derive stages' prompts (and NLTK): --sweep only

    profile = profile_plan.read_profile(args.sweep)
    stages = profile_plan.rewriting_plans(args.sweep, profile, first)
    prices = {}
    if stages:
        name, model_file = profile_plan.adv_p_generator(profile)
        prices[name] = profile_plan.generator_price(model_file, f"conf/model/{name}.yaml")
    return stages, prices


def plan_all(args: argparse.Namespace, configurations: list[list[str]]) -> PlanResult:
    """Every configuration planned (ValueError names one that cannot run), then the profile's stages."""
    profile, parts = None, None
    plans, first_cfg, seen, prices = [], None, set(), {}
    try:
        if args.sweep is not None:
            import src.planning.profile as profile_plan  # loads the derive stages' prompts (and NLTK): --sweep only

            profile = profile_plan.read_profile(args.sweep)
            if configurations:
                parts = profile_plan.derived_sets(profile, load_config(configurations[0]))
        for overrides in configurations:
            try:
                plan, cfg = plan_one([*overrides, *(parts.overrides if parts else [])], seen)
            except ValueError as error:
                raise ValueError(f"{' '.join(overrides)}: {' '.join(str(error).split())}") from None
            plan["overrides"] = list(overrides)
            first_cfg = first_cfg if first_cfg is not None else cfg
            plans.append(plan)
            if cfg.model.price is not None and plan["to_send"]:
                prices[cfg.model.name] = cfg.model.price
        # the rewriting reads the base sets: planned while a plan-built prepared folder still exists
        stages, stage_prices = plan_sweep_stages(args, first_cfg) if first_cfg is not None else ([], {})
    finally:
        if parts is not None:
            parts.close()
    total = total_of(plans + stages)
    notes = list(parts.notes) if parts else []
    return PlanResult(plans, stages, total, first_cfg, profile, args.sweep, notes, {**prices, **stage_prices})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m src.plan", description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="the overrides of python -m src.run (model=a,b plans each)")
    parser.add_argument("--sweep", type=Path, help="plan every run@ stage of this sweep profile (e.g. sweep.yaml)")
    parser.add_argument("--json", type=Path, help="also write the plan as JSON here")
    parser.add_argument("-m", "--multirun", action="store_true", help="accepted for symmetry with src.run")
    args = parser.parse_args(argv)
    setup_logging(logging.WARNING)
    problem = override_error(args.overrides)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        if args.sweep is not None:
            configurations = sweep_configurations(args.sweep, args.overrides)
        else:
            configurations = expand(args.overrides)
    except Exception as error:  # noqa: BLE001 - Hydra's parser raises its own types
        print(f"error: {str(error).splitlines()[0] if str(error) else type(error).__name__}", file=sys.stderr)
        return 2
    try:
        result = plan_all(args, configurations)
        lines = sections(result)
    except ValueError as error:  # ConfigError included: one line naming what cannot be planned
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    if args.json is not None:
        whole = {"configurations": result.plans, "stages": result.stages, "total": result.total}
        args.json.write_text(json.dumps(whole, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
