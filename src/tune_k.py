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

from src.params import register_resolver
from src.prompts import K_CHOICES, select_k, strategy_from_config
from src.run import build_backend, run_dataset, select_exemplars_for

log = logging.getLogger("src.tune_k")
register_resolver()

VALIDATION_SPLIT = "val"


def tune(cfg: DictConfig) -> dict:
    """Validation F1 for every k and task, and the chosen k per task."""
    strategy = strategy_from_config(cfg.strategy)
    if not strategy.inductive:
        raise SystemExit(f"strategy {strategy.name} uses no exemplars: choose an inductive one (I, D+I, A+I, A+D+I)")
    backend = build_backend(cfg)
    result: dict = {"model": cfg.model.name, "strategy": strategy.name, "limit": cfg.limit, "seed": cfg.seed, "tasks": {}}
    for task in cfg.tasks:
        path = Path(cfg.paths.prepared) / task / f"{VALIDATION_SPLIT}.jsonl"

        def evaluate(k: int, task: str = task, path: Path = path) -> float:
            with_k = dataclasses.replace(strategy, k=k)
            exemplars = select_exemplars_for(cfg, with_k, task)
            outcome = run_dataset(cfg, backend, with_k, task, VALIDATION_SPLIT, path, exemplars)
            if outcome.evaluation is None:
                raise SystemExit(f"{task}: {len(outcome.failed_ids)} request(s) failed; re-run to complete them")
            return outcome.evaluation.metrics()[f"{task}.{VALIDATION_SPLIT}.f1"]

        selection = select_k(evaluate, K_CHOICES)
        result["tasks"][task] = {"scores": selection.scores, "best_k": selection.best_k}
        log.info("%s: validation F1 by k %s -> k=%d", task, selection.scores, selection.best_k)
    return result


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    result = tune(cfg)
    out = Path(cfg.get("k_selection_output") or "reports/k_selection.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
