"""Choose the number of inductive exemplars k on the validation split, once.

``python -m src.tune_k model=smollm2_135m strategy=I limit=20`` runs the configuration
on ``{task}/val.jsonl`` with k in {3, 5, 8} (exemplars from the train split, as in every
run), scores each with the study's metric and picks the best k per task (ties: the
smaller k). The result goes to ``reports/k_selection.json``; the chosen value is then
kept in the strategy files (``conf/strategy/*.yaml: k``) so that every later run uses it.

An API model's requests are paid like a run's (:mod:`src.billing.session`): the ceiling of every
request of every k and task is reserved under ``budget.*`` before the first one (a plan past a
cap: one ``error: budget: ...`` line, exit 2), every attempt is admitted and billed by the meter,
and the ledger is settled to what was spent whatever happens.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from src.backends.tokenizers import token_counter
from src.billing.forecast import forecast_configuration
from src.billing.meter import Meter
from src.billing.prices import price_age_warning
from src.billing.session import PaidSession
from src.config.budget import uncapped_sweep
from src.config.schema import RunConfig
from src.config.store import register_config
from src.core.errors import ConfigError
from src.data.schema import read_records
from src.data.splits import subset_by_id
from src.prompts import K_CHOICES, select_k
from src.redact import install_log_redaction
from src.runs.configure import build_backend
from src.runs.prompted import PromptedSystem
from src.scoring.evaluate import evaluate_dataset
from src.scoring.system import DatasetPlan

log = logging.getLogger("src.tune_k")
register_config()

VALIDATION_SPLIT = "val"


def tune(config: RunConfig) -> dict:
    """Validation F1 for every k and task, and the chosen k per task."""
    strategy = config.strategy
    if not strategy.inductive:
        raise SystemExit(f"strategy {strategy.name} uses no exemplars: choose an inductive one (I, D+I, A+I, A+D+I)")
    backend = build_backend(config)
    session = paid_session(config, backend)
    result: dict = {
        "model": config.model.name,
        "strategy": strategy.name,
        "limit": config.limit,
        "seed": config.seed,
        "tasks": {},
    }
    plans = validation_plans(config)
    reserve(session, config, backend, plans)
    with session:
        for plan in plans:
            task = plan.task

            def evaluate(k: int, task: str = task, plan: DatasetPlan = plan) -> float:
                system = PromptedSystem(config, backend, session.meter, dataclasses.replace(strategy, k=k))
                produced = system.produce(plan)
                if produced.outputs is None:
                    raise SystemExit(f"{task}: {len(produced.failures)} request(s) failed; re-run to complete them")
                evaluation = evaluate_dataset(task, VALIDATION_SPLIT, plan.records, produced.outputs, 1, config.seed)
                return evaluation.metrics()[f"{task}.{VALIDATION_SPLIT}.f1"]

            selection = select_k(evaluate, K_CHOICES)
            result["tasks"][task] = {"scores": selection.scores, "best_k": selection.best_k}
            log.info("%s: validation F1 by k %s -> k=%d", task, selection.scores, selection.best_k)
    log.info("%s", session.spend_line())
    return result


def validation_plans(config: RunConfig) -> list[DatasetPlan]:
    """The validation records of every task (the seeded ``limit`` subset)."""
    plans = []
    for task in config.tasks:
        path = Path(config.paths.prepared) / task / f"{VALIDATION_SPLIT}.jsonl"
        plans.append(
            DatasetPlan(task, VALIDATION_SPLIT, path, subset_by_id(read_records(path), config.limit, config.seed))
        )
    return plans


def paid_session(config: RunConfig, backend) -> PaidSession:
    """The tuning's session: the model's price and token counter, the run's budget; the price's age
    logged first."""
    warning = price_age_warning(config.model.name, config.model.price, config.budget.price_max_age_days)
    if warning:
        log.warning("%s", warning)
    meter = Meter(config.model.price, token_counter(config.model))
    return PaidSession(f"tune_k {config.run_name}", meter, config.budget, sweep=uncapped_sweep(config.budget))


def reserve(session: PaidSession, config: RunConfig, backend, plans: list[DatasetPlan]) -> None:
    """Reserve the ceiling of every request of every k (one plan, identical prompts sent once)."""
    batches = []
    for plan in plans:
        for k in K_CHOICES:
            system = PromptedSystem(config, backend, session.meter, dataclasses.replace(config.strategy, k=k))
            batches.append((f"{plan.task}/{VALIDATION_SPLIT} k={k}", system.requests(plan)))
    planned = forecast_configuration(
        session.name, backend, batches, config.model.price, session.meter.counter, mode=backend.mode
    )
    log.info(
        "%s: %d requests, %d to send, ceiling %s",
        session.name,
        planned["requests"],
        planned["to_send"],
        planned["ceiling_cost_usd"],
    )
    session.reserve(planned["ceiling_cost_usd"], int(planned["to_send"]))
    session.attach(backend)


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    install_log_redaction()
    try:
        config = RunConfig.from_hydra(cfg)
        result = tune(config)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    out = Path(cfg.get("k_selection_output") or "reports/k_selection.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
