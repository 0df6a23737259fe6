"""Choose the number of inductive exemplars k on the validation split, once.

``python -m src.tune_k model=smollm2_135m strategy=I limit=20`` runs the configuration
on ``{task}/val.jsonl`` with k in {3, 5, 8} (exemplars from the train split, as in every
run), scores each with the study's metric and picks the best k per task (ties: the
smaller k). The result goes to ``reports/k_selection.json``; the chosen value is then
kept in the strategy files (``conf/strategy/*.yaml: k``) so that every later run uses it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import hydra
from omegaconf import DictConfig

from src.billing.meter import Meter
from src.config.errors import ConfigError
from src.config.schema import RunConfig
from src.config.store import register_config
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
    meter = Meter(config.model.price)
    result: dict = {
        "model": config.model.name,
        "strategy": strategy.name,
        "limit": config.limit,
        "seed": config.seed,
        "tasks": {},
    }
    for task in config.tasks:
        path = Path(config.paths.prepared) / task / f"{VALIDATION_SPLIT}.jsonl"
        records = subset_by_id(read_records(path), config.limit, config.seed)
        plan = DatasetPlan(task, VALIDATION_SPLIT, path, records)

        def evaluate(k: int, task: str = task, plan: DatasetPlan = plan) -> float:
            system = PromptedSystem(config, backend, meter, dataclasses.replace(strategy, k=k))
            produced = system.produce(plan)
            if produced.outputs is None:
                raise SystemExit(f"{task}: {len(produced.failures)} request(s) failed; re-run to complete them")
            evaluation = evaluate_dataset(task, VALIDATION_SPLIT, plan.records, produced.outputs, 1, config.seed)
            return evaluation.metrics()[f"{task}.{VALIDATION_SPLIT}.f1"]

        selection = select_k(evaluate, K_CHOICES)
        result["tasks"][task] = {"scores": selection.scores, "best_k": selection.best_k}
        log.info("%s: validation F1 by k %s -> k=%d", task, selection.scores, selection.best_k)
    return result


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    install_log_redaction()
    try:
        config = RunConfig.from_hydra(cfg)
    except ConfigError as error:
        raise SystemExit(f"error: {error}") from None
    result = tune(config)
    out = Path(cfg.get("k_selection_output") or "reports/k_selection.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
