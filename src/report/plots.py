"""Long-format CSV tables for ``dvc plots show`` / ``dvc plots diff`` (declared in dvc.yaml).

DVC renders a plot from one x and one y column, so each table here is the tidy form of a
report table people compare across experiments: F1 per configuration and dataset, the RQ1
outcome probabilities, and the error-type shares.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from src.report.analysis import Analysis
from src.scoring.stats import OUTCOMES

ERROR_TYPES = ("missing", "spurious", "boundary")


def f1_by_dataset(analysis: Analysis) -> pd.DataFrame:
    scores = analysis.study.scores
    rows = [
        {
            "configuration_dataset": f"{r.config} {r.task}/{r.dataset}",
            "configuration": r.config,
            "dataset": f"{r.task}/{r.dataset}",
            "f1": round(float(r.f1), 6),
        }
        for r in scores.itertuples(index=False)
        if not (isinstance(r.f1, float) and math.isnan(r.f1))
    ]
    return pd.DataFrame(rows, columns=["configuration_dataset", "configuration", "dataset", "f1"])


def rq1_transfer(analysis: Analysis) -> pd.DataFrame:
    table = analysis.rq1
    chosen = table[(table["correction"] == "none") & (table["group"] == "all")]
    rows = []
    for r in chosen.to_dict("records"):
        for outcome in OUTCOMES:
            value = r.get(outcome)
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            rows.append(
                {
                    "target_outcome": f"{r['target']} {outcome}",
                    "target": r["target"],
                    "outcome": outcome,
                    "probability": round(float(value), 6),
                    "pairs": int(r["pairs"]),
                }
            )
    return pd.DataFrame(rows, columns=["target_outcome", "target", "outcome", "probability", "pairs"])


def error_types(analysis: Analysis) -> pd.DataFrame:
    rows = []
    for r in analysis.errors.to_dict("records"):
        for name in ERROR_TYPES:
            share = r.get(f"share_{name}")
            if share is None or (isinstance(share, float) and math.isnan(share)):
                continue
            rows.append(
                {
                    "dataset_error": f"{r['dataset']} {name}",
                    "dataset": r["dataset"],
                    "error": name,
                    "share": round(float(share), 6),
                }
            )
    return pd.DataFrame(rows, columns=["dataset_error", "dataset", "error", "share"])


def write_plots(analysis: Analysis, directory: Path) -> dict[str, Path]:
    """The three plot tables as CSV under ``directory``; returns name -> path."""
    directory.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, build in (("f1_by_dataset", f1_by_dataset), ("rq1_transfer", rq1_transfer), ("error_types", error_types)):
        path = directory / f"{name}.csv"
        build(analysis).to_csv(path, index=False)
        written[name] = path
    return written
