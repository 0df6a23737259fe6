"""Sample size before spending: how many instances each dataset needs to detect a difference delta.

From a pilot (an earlier run's evidence folders, e.g. the default profile's ``evidence/runs``),
per dataset: the spread of the paired F1 difference between configurations scored on the same
instances, resampled by whole documents (:mod:`src.scoring.clustered`), gives the spread one
document contributes, ``sigma_1 = sd(delta*) * sqrt(documents)``. The verdicts' two-sided test at
alpha (:mod:`src.scoring.calibrated`) detects delta with probability ``power`` once
``(z(1-alpha/2) + z(power)) * sigma_1 / sqrt(D) <= delta``:

    documents needed  D = max(ceil(((z(1-alpha/2) + z(power)) * sigma_1 / delta) ** 2), minimum documents)
    instances needed  = ceil(D * instances per document in the pilot)

(the normal approximation), never fewer than the documents a verdict needs
(:func:`src.scoring.calibrated.minimum_documents`). A pilot with fewer documents than that has no
usable spread (one document resamples to itself: sd 0): its row says so and asks for nothing. A
dataset with a single configuration in the pilot has no paired difference: its F1 spread times
sqrt(2) stands in (two independent configurations), and the row says so.
:func:`power_rows` sets the result beside a plan's cost (``python -m src.plan``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from src.core.locate import PROJECT_ROOT, project_relative
from src.core.settings import load_params
from src.scoring.calibrated import minimum_documents
from src.scoring.clustered import cluster_index, cluster_sums
from src.scoring.stats import all_pairs_bootstrap, resample_counts
from src.scoring.verdicts import all_pairs_tost, minimum_detectable_difference, z_sum
from src.study import PRIMARY_METRIC
from src.tracking.evidence import RUN_FILE, evidence_folders, read_evidence

PILOT_RESAMPLES = 2000
NEEDED_COLUMNS = [
    "dataset",
    "pilot_configurations",
    "pilot_instances",
    "pilot_documents",
    "pilot_mdd",
    "documents_needed",
    "instances_needed",
    "basis",
]


def pilot_statistics(folders: Iterable[Path | str]) -> dict[str, dict[str, tuple[list[str], np.ndarray]]]:
    """``task/dataset`` -> configuration -> (ids, (N, 3) statistics) from evidence folders (or folders holding them)."""
    out: dict[str, dict[str, tuple[list[str], np.ndarray]]] = {}
    for root in folders:
        root = Path(root)
        for folder in [root] if (root / RUN_FILE).is_file() else evidence_folders(root):
            evidence = read_evidence(folder, predictions=False)
            name = str(evidence.run.get("run_name") or folder.name)
            for (task, dataset), artifact in sorted(evidence.bootstrap.items()):
                stats = np.asarray(artifact["stats"][PRIMARY_METRIC], dtype=np.float64).reshape(-1, 3)
                out.setdefault(f"{task}/{dataset}", {})[name] = ([str(i) for i in artifact["ids"]], stats)
    return out


def _ordered(ids: list[str], stats: np.ndarray, order: Sequence[str]) -> np.ndarray:
    position = {instance: n for n, instance in enumerate(ids)}
    return stats[np.array([position[i] for i in order], dtype=np.int64)]


def _document_spread(configs: Mapping[str, tuple[list[str], np.ndarray]], seed: int) -> tuple[float, int, int, str]:
    """(sigma_1: the delta's spread per document, instances, documents, basis) of one dataset's pilot."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for name, (ids, _) in configs.items():
        groups.setdefault(tuple(sorted(ids)), []).append(name)
    ids, members = max(groups.items(), key=lambda item: (len(item[1]), len(item[0])))
    ids = list(ids)
    index, documents = cluster_index(ids)
    stacked = np.stack([_ordered(*configs[m], ids) for m in members])
    units = cluster_sums(stacked, index, documents)
    counts = resample_counts(documents, PILOT_RESAMPLES, seed)
    boot = all_pairs_bootstrap(units, counts).boot_f1
    if len(members) >= 2:
        _, sd = all_pairs_tost(boot, 1.0)
        spread, basis = float(np.median(sd[np.triu_indices(len(members), 1)])), f"{len(members)} paired configurations"
    else:
        spread, basis = float(boot[0].std() * math.sqrt(2)), "one configuration: its F1 spread x sqrt(2)"
    return spread * math.sqrt(documents), len(ids), documents, basis


def instances_needed(
    folders: Path | str | Sequence[Path | str], delta: float, alpha: float = 0.05, power: float = 0.8, seed: int = 0
) -> pd.DataFrame:
    """Per dataset of the pilot: its size and MDD, and the documents and instances needed to detect ``delta``."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    folders = [folders] if isinstance(folders, (str, Path)) else list(folders)
    factor = z_sum(alpha / 2, power)
    least = minimum_documents(alpha)
    rows = []
    for key, configs in pilot_statistics(folders).items():
        sigma, instances, documents, basis = _document_spread(configs, seed)
        if documents < least:
            too_small = f"pilot too small: {documents} document(s), a verdict needs at least {least}"
            rows.append(
                dict.fromkeys(NEEDED_COLUMNS)
                | {"dataset": key, "pilot_configurations": len(configs), "pilot_instances": instances}
                | {"pilot_documents": documents, "basis": too_small}
            )
            continue
        needed = max(math.ceil((factor * sigma / delta) ** 2) if sigma > 0 else 1, least)
        rows.append(
            {
                "dataset": key,
                "pilot_configurations": len(configs),
                "pilot_instances": instances,
                "pilot_documents": documents,
                "pilot_mdd": float(minimum_detectable_difference(sigma / math.sqrt(documents), alpha / 2, power)),
                "documents_needed": needed,
                "instances_needed": math.ceil(needed * instances / documents),
                "basis": basis,
            }
        )
    return pd.DataFrame(rows, columns=NEEDED_COLUMNS, dtype=object)  # object: counts stay ints beside a None


def power_rows(needed: pd.DataFrame, plans: Sequence[Mapping[str, Any]]) -> list[str]:
    """Power beside cost, one line per dataset: instances needed (pilot), requests planned and the cost
    ceiling of those requests (the plan's prompt and output costs split by each dataset's token bounds:
    cost is linear in tokens, so the split is exact)."""
    planned: dict[str, dict[str, float]] = {}
    for plan in plans:
        datasets = plan.get("datasets") or {}
        prompt_total = sum(row.get("prompt_token_bound", 0) for row in datasets.values())
        output_total = sum(row.get("output_token_ceiling", 0) for row in datasets.values())
        for label, row in datasets.items():
            entry = planned.setdefault(label, {"requests": 0, "cost": 0.0, "priced": True})
            entry["requests"] += row.get("requests", 0)
            prompt_cost, output_cost = plan.get("prompt_cost_usd"), plan.get("output_ceiling_cost_usd")
            if prompt_cost is None or output_cost is None:
                entry["priced"] = False
                continue
            entry["cost"] += prompt_cost * row.get("prompt_token_bound", 0) / prompt_total if prompt_total else 0.0
            entry["cost"] += output_cost * row.get("output_token_ceiling", 0) / output_total if output_total else 0.0
    lines = ["power beside cost (instances needed from the pilot's paired differences; docs/scoring.md#power):"]
    by_key = {row["dataset"]: row for row in needed.to_dict("records")}
    for key in dict.fromkeys([*planned, *by_key]):
        plan_part = planned.get(key)
        cost = "not planned"
        if plan_part is not None:
            price = f"${plan_part['cost']:.2f}" if plan_part["priced"] else "price unknown"
            cost = f"{int(plan_part['requests']):,} requests planned, cost at most {price}"
        pilot = by_key.get(key)
        power = (
            "no pilot evidence"
            if pilot is None
            else pilot["basis"]
            if pd.isna(pilot["documents_needed"])
            else f"{int(pilot['instances_needed']):,} instances ({int(pilot['documents_needed']):,} documents) needed; "
            f"pilot: {pilot['pilot_instances']} instances, MDD {pilot['pilot_mdd']:.3f} ({pilot['basis']})"
        )
        lines.append(f"  {key}: {power}; {cost}")
    return lines


def power_beside_cost(plans: Sequence[Mapping[str, Any]], pilot: Sequence[Path | str] | None = None) -> list[str]:
    """The lines ``python -m src.plan`` prints after the cost: per dataset the instances needed to detect
    params.yaml's ``analysis.margin`` at ``analysis.alpha`` and ``analysis.power``, from the pilot
    (default: this checkout's ``evidence/runs`` and ``evidence/finetuned``, e.g. the default profile's),
    beside the requests planned and their cost. Without pilot evidence, one line saying so."""
    default = [PROJECT_ROOT / "evidence" / "runs", PROJECT_ROOT / "evidence" / "finetuned"]
    folders = [Path(p) for p in pilot] if pilot is not None else default
    present = [f for f in folders if f.is_dir() and ((f / RUN_FILE).is_file() or evidence_folders(f))]
    if not present:
        where = ", ".join(project_relative(f) or str(f) for f in folders)
        return [f"power: no pilot evidence under {where} (run a pilot profile, e.g. the default one, first)"]
    settings = load_params()
    delta, alpha, power = settings.analysis.margin, settings.analysis.alpha, settings.analysis.power
    try:
        needed = instances_needed(present, delta, alpha, power, seed=settings.seed)
    except (ValueError, KeyError) as error:
        return [f"power: the pilot evidence could not be read: {' '.join(str(error).split())}"]
    head = f"to detect a difference of {delta} F1 (analysis.margin) at alpha {alpha} with power {power}"
    rows = power_rows(needed, plans)
    return [rows[0].rstrip(":") + f", {head}:", *rows[1:]]
