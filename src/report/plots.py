"""Long-format CSV tables for ``dvc plots show`` / ``dvc plots diff`` (declared in dvc.yaml).

DVC renders a plot from one x and one y column, so each table here is the tidy form of a
report table people compare across experiments: F1 per configuration and dataset, the RQ1
outcome counts, and the error-type shares.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from src.report.analysis import Analysis
from src.scoring.metrics import ERROR_TYPES
from src.scoring.verdicts import VERDICTS as OUTCOMES


def f1_by_dataset(analysis: Analysis) -> pd.DataFrame:
    scores = analysis.results.scores
    rows = [
        {
            "configuration_dataset": f"{r.config} {r.task}/{r.dataset}",
            "configuration": r.config,
            "dataset": f"{r.task}/{r.dataset}",
            "f1": round(float(r.f1), 6),
        }
        for r in scores.itertuples(index=False)
        if _finite(r.f1)
    ]
    return pd.DataFrame(rows, columns=["configuration_dataset", "configuration", "dataset", "f1"])


def _finite(value: object) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _long_rows(records: list[dict], names: tuple[str, ...], column_of, row_of) -> list[dict]:
    """One row per (record, name) whose value is present and finite: records in order, then names."""
    return [
        row_of(r, name, round(float(r[column_of(name)]), 6))
        for r in records
        for name in names
        if _finite(r.get(column_of(name)))
    ]


def rq1_transfer(analysis: Analysis) -> pd.DataFrame:
    """Pairs better on base, counted by their outcome on each target (``pairs``), with the share beside.

    The count is plotted, not the share: a target on which no pair was better on base (too few
    documents for any verdict, say) then shows four bars of 0 instead of vanishing from the plot.
    """
    table = analysis.rq1
    chosen = table[(table["correction"] == "none") & (table["group"] == "all")]
    rows = [
        {
            "target_outcome": f"{r['target']} {outcome}",
            "target": r["target"],
            "outcome": outcome,
            "pairs": int(r[f"n_{outcome}"]),
            "probability": round(float(r[outcome]), 6) if _finite(r[outcome]) else None,
            "tested": int(r["pairs"]),
        }
        for r in chosen.to_dict("records")
        for outcome in OUTCOMES
    ]
    return pd.DataFrame(rows, columns=["target_outcome", "target", "outcome", "pairs", "probability", "tested"])


def error_types(analysis: Analysis) -> pd.DataFrame:
    rows = _long_rows(
        analysis.errors.to_dict("records"),
        ERROR_TYPES,
        lambda name: f"share_{name}",
        lambda r, name, share: {
            "dataset_error": f"{r['dataset']} {name}",
            "dataset": r["dataset"],
            "error": name,
            "share": share,
        },
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
