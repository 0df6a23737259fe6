"""Robustness read instance by instance: flip rate, performance drop rate and worst-case F1.

The derived sets (``adv``, ``adv_p``, ``voc``; :data:`src.study.DERIVED_DATASETS`) are built
instance by instance from base instances and keep their ids, so a configuration's answer on a
perturbed instance can be set against its answer on the original (docs/scoring.md):

* **flip rate**: the share of instances whose per-instance LCS F1 drops by more than the
  threshold (``analysis.flip_threshold``) from base to the perturbed version;
* **drop rate** (PromptBench's performance drop rate): ``(F1_base - F1_shift) / F1_base`` on
  the instances both sets hold (micro F1; undefined when F1_base is 0);
* **worst-case F1** (HELM): micro F1 over each instance's worst version (the base instance or
  its perturbation, the lower per-instance F1; ties keep base). Row ``all`` takes the worst over
  base and every derived set of the task that holds the instance.

Each comes with a 95% interval from one clustered bootstrap (whole documents,
:mod:`src.scoring.clustered`) shared by every configuration scored on the same instances; with
fewer base documents holding a gold span than :func:`src.scoring.calibrated.minimum_documents`
there is no interval (NaN), as there is no verdict. ``instances`` counts the shared instances the
metrics read and ``base_only`` the base instances the shifted set does not hold (left out).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping

import numpy as np
import pandas as pd

from src.report.comparisons import dataset_seed
from src.rounding import rounded
from src.scoring.calibrated import instance_f1, minimum_documents
from src.scoring.clustered import DOCUMENT, resampling_units
from src.scoring.metrics import precision_recall_f1
from src.scoring.stats import resample_counts
from src.study import DERIVED_DATASETS

ALL_SHIFTS = "all"
METRICS = ("flip_rate", "drop_rate", "worst_f1")
COLUMNS = [
    "task",
    "shift",
    "configuration",
    "instances",
    "base_only",
    "units",
    "documents",
    "f1_base",
    "f1_shifted",
    *(f"{m}{suffix}" for m in METRICS for suffix in ("", "_ci_low", "_ci_high")),
]


def _metrics(totals: np.ndarray) -> dict[str, np.ndarray]:
    """Metrics from summed columns ``(flips, count, base(3), shifted(3), worst(3))``, any leading shape."""
    f1_base = precision_recall_f1(totals[..., 2:5])[2]
    f1_shift = precision_recall_f1(totals[..., 5:8])[2]
    with np.errstate(divide="ignore", invalid="ignore"):
        drop = np.where(f1_base > 0, (f1_base - f1_shift) / np.where(f1_base > 0, f1_base, 1.0), np.nan)
        flips = totals[..., 0] / totals[..., 1]
    return {
        "f1_base": f1_base,
        "f1_shifted": f1_shift,
        "flip_rate": flips,
        "drop_rate": drop,
        "worst_f1": precision_recall_f1(totals[..., 8:11])[2],
    }


def instance_columns(base: np.ndarray, shifted: list[np.ndarray], threshold: float) -> np.ndarray:
    """(N, 11) per-instance columns: flip (vs the worst shifted version), 1, base, worst shifted, worst overall."""
    base_f1 = instance_f1(base)
    shifted_f1 = np.stack([instance_f1(s) for s in shifted])  # (V, N)
    lowest = np.argmin(shifted_f1, axis=0)  # first on ties
    rows = np.arange(base.shape[0])
    worst_shift = np.stack(shifted)[lowest, rows]
    worst = np.where((shifted_f1[lowest, rows] < base_f1)[:, None], worst_shift, base)
    flips = (base_f1 - shifted_f1[lowest, rows]) > threshold
    return np.column_stack([flips, np.ones(len(rows)), base, worst_shift, worst])


def _versions(datasets: Mapping[str, object], task: str) -> list[tuple[str, list[str]]]:
    """(shift label, derived dataset keys) of a task: each derived set alone, then all of them together."""
    present = [f"{task}/{d}" for d in DERIVED_DATASETS if f"{task}/{d}" in datasets]
    out = [(key.split("/", 1)[1], [key]) for key in present]
    if len(present) > 1:
        out.append((ALL_SHIFTS, present))
    return out


def _interval(samples: np.ndarray) -> np.ndarray:
    """(2, S) 95% percentile interval of (R, S) resampled values, NaNs (an undefined drop rate) left out."""
    if not np.isnan(samples).any():
        return np.quantile(samples, [0.025, 0.975], axis=0)
    with warnings.catch_warnings():  # a column undefined on every resample: NaN, the table says so
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanquantile(samples, [0.025, 0.975], axis=0)


def robustness_table(
    datasets: Mapping[str, object],
    resamples: int,
    seed: int,
    *,
    threshold: float,
    alpha: float,
    unit: str = DOCUMENT,
) -> pd.DataFrame:
    """One row per (task, shift, configuration) scored on base and the shifted set(s) with shared ids
    (intervals at 95%; ``alpha`` sets the minimum documents an interval needs)."""
    rows = []
    tasks = dict.fromkeys(key.split("/", 1)[0] for key in datasets)
    for task in tasks:
        base = datasets.get(f"{task}/base")
        if base is None:
            continue
        for label, keys in _versions(datasets, task):
            groups: dict[tuple[str, ...], list[str]] = {}
            for config in base.configs:
                if not all(config in datasets[k].configs for k in keys):
                    continue
                shared = set(base.ids[config]).intersection(*(datasets[k].ids[config] for k in keys))
                if shared:
                    groups.setdefault(tuple(sorted(shared)), []).append(config)
            for ids, members in groups.items():
                columns = np.stack(
                    [
                        instance_columns(
                            base.stacked([c], ids)[0], [datasets[k].stacked([c], ids)[0] for k in keys], threshold
                        )
                        for c in members
                    ]
                )  # (S, N, 11)
                units = resampling_units(columns, ids, unit)
                counts = resample_counts(units.shape[1], resamples, dataset_seed(seed, f"{task}|robust|{label}", ids))
                width = units.shape[2]
                resampled = (counts @ units.transpose(1, 0, 2).reshape(units.shape[1], -1)).reshape(
                    resamples, len(members), width
                )
                observed = _metrics(columns.sum(axis=1))
                boot = _metrics(resampled)
                bounds = {m: _interval(boot[m]) for m in METRICS}  # (2, S)
                documents = int(np.count_nonzero(units[0, :, 4] > 0))  # base gold spans per unit
                if documents < minimum_documents(alpha):
                    bounds = {m: np.full_like(b, np.nan) for m, b in bounds.items()}
                for s, config in enumerate(members):
                    row = {
                        "task": task,
                        "shift": label,
                        "configuration": config,
                        "instances": len(ids),
                        "base_only": len(base.ids[config]) - len(ids),
                        "units": units.shape[1],
                        "documents": documents,
                        "f1_base": float(observed["f1_base"][s]),
                        "f1_shifted": float(observed["f1_shifted"][s]),
                    }
                    for metric in METRICS:
                        row |= {  # rounded: resampled values come from matrix products (CPU-dependent last bits)
                            metric: rounded(float(observed[metric][s])),
                            f"{metric}_ci_low": rounded(float(bounds[metric][0, s])),
                            f"{metric}_ci_high": rounded(float(bounds[metric][1, s])),
                        }
                    rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def metric_name(*parts: str) -> str:
    """An MLflow metric name from parts (characters MLflow refuses, e.g. ``+``, become ``_``)."""
    return ".".join(re.sub(r"[^\w\-. /:]", "_", part) for part in parts)


def robustness_metrics(table: pd.DataFrame) -> dict[str, float]:
    """``robustness.{task}.{shift}.{configuration}.{metric}`` (and ``_ci_low``/``_ci_high``) for
    MLflow; undefined values (a drop rate on a base F1 of 0) are left out."""
    out = {}
    for row in table.to_dict("records"):
        for metric in METRICS:
            for suffix in ("", "_ci_low", "_ci_high"):
                value = row[metric + suffix]
                if value is not None and np.isfinite(value):
                    out[metric_name("robustness", row["task"], row["shift"], row["configuration"], metric + suffix)] = (
                        float(value)
                    )
    return out
