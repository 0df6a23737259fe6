"""The report's tables: every analysis table as CSV (full precision) and markdown (3 decimals).

Also the number formatting the written report shares (:func:`fmt`, :func:`pct`,
:func:`markdown_table`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from src.report import heatmap, rq
from src.report.analysis import finetuned_pairs, instance_table, pairwise_long
from src.scoring.variants import VARIANTS
from src.study import PRIMARY_SCORER, TASK_ORDER

if TYPE_CHECKING:
    from src.report.analysis import Analysis

DETAIL_METRICS = (
    "f1",
    "f1_ci_low",
    "f1_ci_high",
    "f1_ci_low_instance",
    "f1_ci_high_instance",
    "precision",
    "recall",
    "strict_f1",
    "relaxed_f1",
    "parse_failure_rate",
    "n",
    "errors.missing",
    "errors.spurious",
    "errors.boundary",
    "errors.exact",
    "TIMEX.f1",
    "EVENT.f1",
)
COUNT_COLUMNS = {
    "pairs",
    "n",
    "configs",
    "models",
    "sizes",
    "strategies",
    "instances",
    "missing",
    "spurious",
    "boundary",
}


def is_count_column(name: Any) -> bool:
    """Columns that hold counts (printed without decimals), e.g. ``pairs (Holm)`` or ``errors.missing``."""
    base = str(name).split(" (")[0]
    return base in COUNT_COLUMNS or base.startswith(("n_", "errors."))


def fmt(value: Any, digits: int = 3) -> str:
    """A number with fixed decimals, integers as integers, missing values as a dash."""
    if value is None or value is pd.NA or (isinstance(value, (float, np.floating)) and math.isnan(value)):
        return "–"
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return f"{value:.{digits}f}"
    return str(value)


def pct(value: float) -> str:
    return "–" if value is None or math.isnan(value) else f"{100 * value:.1f}%"


def markdown_table(table: pd.DataFrame, index: bool = True, digits: int = 3) -> str:
    """A GitHub-flavoured markdown table (no extra dependency)."""
    frame = table.reset_index() if index else table
    header = [str(c) for c in frame.columns]
    counts = [is_count_column(c) for c in frame.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    for row in frame.itertuples(index=False):
        cells = []
        for value, count in zip(row, counts):
            if (
                count
                and isinstance(value, (float, np.floating))
                and not math.isnan(value)
                and float(value).is_integer()
            ):
                value = int(value)
            cells.append(fmt(value, digits).replace("|", "\\|"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _blank(value: Any, count: bool) -> bool:
    if value is None or value is pd.NA or (isinstance(value, str) and value.strip() in ("", "–")):
        return True
    if isinstance(value, (float, np.floating)) and math.isnan(value):
        return True
    return count and isinstance(value, (int, float, np.integer, np.floating)) and value == 0


def drop_empty_rows(table: pd.DataFrame, keep: int = 0) -> tuple[pd.DataFrame, int]:
    """``table`` without rows whose values (after the first ``keep`` label columns) are all missing,
    "–" or zero counts; returns the kept rows and how many were dropped."""
    if table.empty:
        return table, 0
    counts = [is_count_column(c) for c in table.columns]
    empty = [
        all(_blank(v, c) for v, c in list(zip(row, counts))[keep:]) for row in table.itertuples(index=False, name=None)
    ]
    mask = np.array(empty, dtype=bool)
    return table.loc[~mask], int(mask.sum())


def dropped_note(dropped: int) -> str:
    """The sentence under a table that left out empty rows ("" when none was)."""
    if not dropped:
        return ""
    return f"{dropped} row{'' if dropped == 1 else 's'} with nothing to show (all values missing) left out."


def compact_table(table: pd.DataFrame, index: bool = True, digits: int = 3, keep: int = 0) -> str:
    """:func:`markdown_table` without all-empty rows, with a sentence saying how many were left out;
    one sentence instead of a table when no row is left."""
    kept, dropped = drop_empty_rows(table, keep)
    if kept.empty:
        return f"Nothing to show: all {dropped} rows are empty." if dropped else "Nothing to show: no rows."
    note = dropped_note(dropped)
    return markdown_table(kept, index, digits) + ("\n\n" + note if note else "")


def with_ci(scores: pd.DataFrame, configs: list[str], keys: list[str] | None = None) -> pd.DataFrame:
    """Configs x datasets cells ``F1 [low, high]``: the logged F1 with the analysis's interval."""
    f1 = rq.score_table(scores, configs, "f1")
    low = rq.score_table(scores, configs, "f1_ci_low").reindex(index=f1.index, columns=f1.columns)
    high = rq.score_table(scores, configs, "f1_ci_high").reindex(index=f1.index, columns=f1.columns)
    keys = [k for k in (keys or list(f1.columns)) if k in f1.columns]
    cells = pd.DataFrame(index=f1.index, columns=keys, dtype=object)
    for key in keys:
        for config in f1.index:
            value = f1.loc[config, key]
            interval = (low.loc[config, key], high.loc[config, key])
            cells.loc[config, key] = (
                "–"
                if pd.isna(value)
                else f"{value:.3f}"
                + ("" if any(pd.isna(v) for v in interval) else f" [{fmt(interval[0])}, {fmt(interval[1])}]")
            )
    cells.index.name = "configuration"
    return cells


def _write(table: pd.DataFrame, directory: Path, name: str, index: bool = True, markdown: bool = True) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    csv = directory / f"{name}.csv"
    table.to_csv(csv, index=index)
    if markdown:
        (directory / f"{name}.md").write_text(compact_table(table, index) + "\n", encoding="utf-8")
    return csv


def configurations_table(analysis: Analysis) -> pd.DataFrame:
    runs = analysis.results.runs
    columns = [
        "model",
        "strategy",
        "kind",
        "family",
        "architecture",
        "params_total_b",
        "params_active_b",
        "size_series",
        "seed",
        "key",
        "code_version",
        "data_version",
    ]
    table = runs[[c for c in columns if c in runs.columns]].copy()
    table.index.name = "configuration"
    return table


def scorer_table(scores: pd.DataFrame) -> pd.DataFrame | None:
    """F1 under every scorer variant logged (columns in registry order), or None when only the primary was."""

    extra = [name for name in VARIANTS if name != PRIMARY_SCORER and f"{name}.f1" in scores.columns]
    if not extra:
        return None
    table = scores[["config", "task", "dataset", "f1", *[f"{name}.f1" for name in extra]]].copy()
    table = table.dropna(subset=[f"{name}.f1" for name in extra], how="all")
    table.columns = ["configuration", "task", "dataset", PRIMARY_SCORER, *extra]
    return table.reset_index(drop=True)


def write_tables(analysis: Analysis, directory: Path) -> dict[str, Path]:
    """Every table as CSV (full precision) and markdown (3 decimals); returns name -> CSV path."""
    results = analysis.results
    scores = results.scores
    prompted = analysis.groups["all"]
    finetuned = [c for c in results.runs.index if results.runs.loc[c, "kind"] == "finetuned"]
    keys = rq.ordered_keys(scores["task"] + "/" + scores["dataset"]) if not scores.empty else []
    written = {}
    for task in TASK_ORDER:
        task_keys = [k for k in keys if k.startswith(task + "/")]
        if task_keys and prompted:
            written[f"results_{task}"] = _write(with_ci(scores, prompted, task_keys), directory, f"results_{task}")
    if finetuned:
        written["finetuned"] = _write(with_ci(scores, finetuned, keys), directory, "finetuned")
    for key in keys:
        task, dataset = key.split("/", 1)
        part = scores[(scores["task"] == task) & (scores["dataset"] == dataset)].set_index("config")
        detail = part[[m for m in DETAIL_METRICS if m in part.columns]]
        detail.index.name = "configuration"
        written[f"dataset_{task}_{dataset}"] = _write(detail, directory, f"dataset_{task}_{dataset}")
    scorers = scorer_table(scores)
    if scorers is not None:
        written["scorers"] = _write(scorers, directory, "scorers", index=False)
    written["configurations"] = _write(configurations_table(analysis), directory, "configurations")
    written["provenance"] = _write(analysis.provenance, directory, "provenance")
    written["comparisons"] = _write(instance_table(analysis), directory, "comparisons", index=False)
    if analysis.tests:
        # ~11,000 rows at paper scale: CSV only
        written["pairwise"] = _write(
            pairwise_long(analysis.prompted, analysis.correction), directory, "pairwise", index=False, markdown=False
        )
    if analysis.finetuned.tests:
        written["finetuned_pairwise"] = _write(finetuned_pairs(analysis), directory, "finetuned_pairwise", index=False)
    written["rq1"] = _write(analysis.rq1, directory, "rq1_transfer", index=False)
    for group, corr in analysis.rq2.items():
        slug = group.replace("+", "_plus").replace("-", "_")
        written[f"rq2_{slug}"] = _write(corr.rho, directory, f"rq2_{slug}_rho")
        _write(corr.p_value, directory, f"rq2_{slug}_p")
        _write(corr.p_adjusted, directory, f"rq2_{slug}_p_{analysis.correction}")
    written["rq3_strategy_pairs"] = _write(analysis.strategy_pairs, directory, "rq3_strategy_pairs", index=False)
    if not analysis.dense_vs_moe.empty:
        written["rq3_dense_vs_moe"] = _write(analysis.dense_vs_moe, directory, "rq3_dense_vs_moe", index=False)
    if not analysis.size_curves.empty:
        written["size_curves"] = _write(analysis.size_curves, directory, "rq3_size_curves", index=False)
        written["size_trend"] = _write(analysis.size_trend, directory, "rq3_size_trend", index=False)
    written["error_types"] = _write(analysis.errors, directory, "error_types", index=False)
    if not analysis.power.empty:
        written["power"] = _write(analysis.power, directory, "power", index=False)
    if not analysis.widths.empty:
        written["interval_widths"] = _write(analysis.widths.attrs["ratios"], directory, "interval_widths", index=False)
        written["intervals"] = _write(analysis.widths, directory, "intervals", index=False, markdown=False)
    if not analysis.robustness.empty:
        written["robustness"] = _write(analysis.robustness, directory, "robustness", index=False)
    flags = heatmap.flags_of(results)
    written["heatmap_f1"] = _write(
        heatmap.heatmap_long(heatmap.f1_grid(analysis), flags, results.runs),
        directory,
        "heatmap_f1",
        index=False,
        markdown=False,
    )
    written["generalization_gap"] = _write(
        heatmap.generalization_gap(analysis), directory, "generalization_gap", index=False, markdown=False
    )
    return written
