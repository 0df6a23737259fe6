"""The study's figures (PNG and SVG): RQ1 bars, RQ2 heatmaps, RQ3 bars, size curves, error types, top labels.

Every function takes the computed tables, writes ``<stem>.png`` and ``<stem>.svg`` and
returns the paths, or an empty list when its input has nothing to draw (the report
then says why). Headless: the Agg backend, fixed SVG hash salt and no timestamps, so
the same numbers give the same files.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from src.report import heatmap  # noqa: E402
from src.report.comparisons import CORRECTION_NAMES  # noqa: E402
from src.study import DATASETS  # noqa: E402

if TYPE_CHECKING:
    from src.report.analysis import Analysis
    from src.report.rq import Correlation

matplotlib.rcParams["svg.hashsalt"] = "tempgen"
#: The four verdicts (src/scoring/verdicts.py): equivalent is shown, inconclusive is grey (the test could not tell).
OUTCOME_COLORS = {"better": "#2a9d4b", "equivalent": "#6aa6d6", "inconclusive": "#d9d9d9", "worse": "#d1495b"}
ERROR_COLORS = {"missing": "#3d6fb6", "spurious": "#e39b2d", "boundary": "#8e5ea2"}
TASK_LINES = {"timex": "-", "eventx": "--", "comp": ":"}


def save(fig, stem: Path, top: float = 1.0) -> list[Path]:
    """Write the figure as PNG and SVG without timestamps; close it. ``top`` reserves room for a legend."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout(rect=(0, 0, 1, top))
    png, svg = stem.with_suffix(".png"), stem.with_suffix(".svg")
    fig.savefig(png, dpi=130, metadata={"Software": None})
    fig.savefig(svg, metadata={"Date": None, "Creator": None})
    plt.close(fig)
    return [png, svg]


def _figure_legend(fig, ax, height_in: float, title: str | None = None) -> float:
    """A single legend (with an optional title) centred above all panels; returns the height share left."""
    handles, labels = ax.get_legend_handles_labels()
    reserve = min(0.3, (0.7 if title else 0.45) / height_in)
    fig.legend(
        handles,
        labels,
        loc="upper center",
        ncol=len(labels),
        fontsize=8,
        frameon=False,
        bbox_to_anchor=(0.5, 1.0),
        title=title,
        title_fontsize=9,
    )
    return 1.0 - reserve


def _stacked_barh(ax, labels: list[str], shares: pd.DataFrame, colors: Mapping[str, str], annotate=None) -> None:
    """Horizontal 100% stacked bars, one per label, columns of ``shares`` in order."""
    left = np.zeros(len(labels))
    positions = np.arange(len(labels))
    for column, color in colors.items():
        values = shares[column].fillna(0).to_numpy(dtype=np.float64)
        ax.barh(positions, values, left=left, color=color, label=column, edgecolor="white", linewidth=0.5)
        left += values
    ax.set_yticks(positions, labels)
    ax.set_ylim(len(labels) - 0.5, -0.5)  # first label on top (invert_yaxis toggles shared axes)
    ax.set_xlim(0, 1)
    if annotate is not None:
        for y, text in zip(positions, annotate):
            ax.text(1.01, y, text, va="center", fontsize=7, transform=ax.get_yaxis_transform())


def _correction_grid(corrections: list[str], panels: list, labels: list, panel_width: float, margin: float):
    """Axes with one row per correction (raw, then corrected) and one column per panel, the
    label rows shared along y; returns ``(fig, axes, height)``."""
    height = len(corrections) * max(1.8, 0.3 * len(labels) + 1.0) + margin
    fig, axes = plt.subplots(
        len(corrections), len(panels), figsize=(panel_width * len(panels) + 1.5, height), squeeze=False, sharey=True
    )
    return fig, axes, height


def rq1_bars(rq1: pd.DataFrame, stem: Path, correction: str) -> list[Path]:
    """Share of better/equivalent/inconclusive/worse on each target among pairs better on the reference."""
    if rq1.empty or rq1["pairs"].sum() == 0:
        return []
    groups = list(dict.fromkeys(rq1["group"]))
    corrections = ["none", correction]
    labels = list(
        dict.fromkeys("all links" if t == "all" else f"{r} \u2192 {t}" for r, t in zip(rq1["reference"], rq1["target"]))
    )
    fig, axes, height = _correction_grid(corrections, groups, labels, panel_width=4.2, margin=0.5)
    for (row, c), (col, group) in itertools.product(enumerate(corrections), enumerate(groups)):
        ax = axes[row][col]
        part = rq1[(rq1["group"] == group) & (rq1["correction"] == c)]
        _stacked_barh(ax, labels, part, OUTCOME_COLORS, [f"n={n}" for n in part["pairs"]])
        ax.set_title(f"{group} ({CORRECTION_NAMES.get(c, c)})", fontsize=9)
        ax.set_xlabel("share of pairs better on the reference")
    return save(fig, stem, _figure_legend(fig, axes[0][0], height))


def rq2_heatmaps(correlations: Mapping[str, Correlation], stem: Path) -> list[Path]:
    """One Spearman heatmap file per configuration group (``<stem>_<group>``); a group without a single
    correlation gets no file (the report gives its reason)."""
    paths = []
    for group, corr in correlations.items():
        size = len(corr.rho)
        side = max(4.5, 0.5 * size + 2.5)
        if not corr.computed:
            continue  # nothing to draw: the report states the reason (corr.reason) instead of a blank image
        fig, ax = plt.subplots(figsize=(side + 1.2, side))
        sns.heatmap(
            corr.rho.astype(float),
            ax=ax,
            vmin=-1,
            vmax=1,
            cmap="vlag",
            annot=size <= 14,
            fmt=".2f",
            annot_kws={"fontsize": 7},
            square=True,
            cbar_kws={"label": "Spearman rho", "shrink": 0.8},
        )
        ax.set_title(f"Spearman rho between datasets: {group} ({len(corr.configs)} configurations)", fontsize=10)
        ax.set_xlabel("dataset")
        ax.set_ylabel("dataset")
        ax.tick_params(axis="x", labelrotation=60, labelsize=8)
        ax.tick_params(axis="y", labelrotation=0, labelsize=8)
        slug = group.replace("+", "_plus").replace("-", "_")
        paths += save(fig, stem.with_name(f"{stem.name}_{slug}"))
    return paths


def outcome_bars_by_dimension(
    table: pd.DataFrame, label_column: str, stem: Path, correction: str, title: str
) -> list[Path]:
    """Stacked verdict bars (better/equivalent/inconclusive/worse) per label, one panel per dimension, raw and corrected rows."""
    if table.empty or table["pairs"].sum() == 0:
        return []
    totals = table.groupby("dimension", sort=False)["pairs"].sum()
    dimensions = [d for d in dict.fromkeys(table["dimension"]) if totals[d] > 0]
    labels = list(dict.fromkeys(table[label_column]))
    corrections = ["none", correction]
    fig, axes, height = _correction_grid(corrections, dimensions, labels, panel_width=2.9, margin=0.8)
    for (row, c), (col, dimension) in itertools.product(enumerate(corrections), enumerate(dimensions)):
        ax = axes[row][col]
        part = table[(table["dimension"] == dimension) & (table["correction"] == c)].set_index(label_column)
        _stacked_barh(ax, labels, part.reindex(labels), OUTCOME_COLORS)
        name = "all dimensions" if dimension == "all" else dimension
        ax.set_title(f"{name} ({CORRECTION_NAMES.get(c, c)})", fontsize=9)
        ax.set_xlabel("share of comparisons")
    return save(fig, stem, _figure_legend(fig, axes[0][0], height, title))


def size_curves(curves: pd.DataFrame, stem: Path) -> list[Path]:
    """Mean F1 over strategies against total parameters, one panel per series, a line per dataset."""
    if curves.empty:
        return []
    series = list(dict.fromkeys(curves["series"]))
    fig, axes = plt.subplots(1, len(series), figsize=(6 * len(series), 4.2), squeeze=False)
    for ax, name in zip(axes[0], series):
        part = curves[curves["series"] == name].sort_values("params_total_b")
        for dataset, points in part.groupby("dataset", sort=False):
            style = TASK_LINES.get(dataset.split("/", 1)[0], "-.")
            ax.plot(points["params_total_b"], points["f1"], marker="o", linestyle=style, label=dataset)
        ax.set_xscale("log")
        sizes = sorted(set(part["params_total_b"]))
        ax.xaxis.set_major_locator(matplotlib.ticker.FixedLocator(sizes))
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xticks(sizes, [f"{size:g}B" for size in sizes], rotation=45 if len(sizes) > 5 else 0)
        ax.set_xlabel("total parameters (billions, log scale)")
        ax.set_ylabel("F1 (mean over strategies)")
        ax.set_title(f"size series: {name}")
        ax.legend(fontsize=7, ncol=2)
    return save(fig, stem)


def error_bars(errors: pd.DataFrame, stem: Path) -> list[Path]:
    """Share of missing / spurious / boundary errors per dataset (all prompted configurations)."""
    if errors.empty:
        return []
    shares = pd.DataFrame({name: errors[f"share_{name}"].to_numpy() for name in ERROR_COLORS})
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(errors) + 1.6))  # height as in the legend reserve below
    _stacked_barh(ax, list(errors["dataset"]), shares, ERROR_COLORS)
    ax.set_xlabel("share of errors")
    ax.set_ylabel("dataset")
    height = 0.35 * len(errors) + 1.6
    return save(fig, stem, _figure_legend(fig, ax, height))


def read_top_gold(stats_json: Path | None) -> dict[str, dict]:
    """``task/dataset`` -> ``{"top": [(string, count), ...], "spans": total}`` for base and t2c, from ``stats.json``."""
    if stats_json is None or not Path(stats_json).exists():
        return {}
    stats = json.loads(Path(stats_json).read_text(encoding="utf-8"))
    out = {}
    for task in DATASETS["t2c"].tasks:
        for dataset in ("base", "t2c"):
            block = stats.get(task, {}).get(dataset) or {}
            if block.get("top_gold"):
                top = [(str(text), int(count)) for text, count in block["top_gold"]]
                out[f"{task}/{dataset}"] = {"top": top, "spans": int(block.get("spans") or sum(c for _, c in top))}
    return out


def top_labels(top_gold: Mapping[str, dict], stem: Path) -> list[Path]:
    """Most frequent gold strings of base vs clinical (t2c), per task, as shares of all gold spans."""
    tasks = [t for t in DATASETS["t2c"].tasks if f"{t}/base" in top_gold and f"{t}/t2c" in top_gold]
    if not tasks:
        return []
    fig, axes = plt.subplots(len(tasks), 2, figsize=(9, 3.4 * len(tasks)), squeeze=False)
    for row, task in enumerate(tasks):
        for col, dataset in enumerate(("base", "t2c")):
            ax = axes[row][col]
            block = top_gold[f"{task}/{dataset}"]
            shares = [count / block["spans"] for _, count in block["top"]]
            ax.barh(range(len(shares)), shares, color="#3d6fb6" if dataset == "base" else "#d1495b")
            ax.set_yticks(range(len(shares)), [text for text, _ in block["top"]], fontsize=7)
            ax.set_ylim(len(shares) - 0.5, -0.5)
            ax.set_xlabel(f"share of the {block['spans']} gold spans")
            ax.set_title(f"{task}/{dataset}: most frequent gold strings", fontsize=9)
    return save(fig, stem)


def draw_heatmap(grid: heatmap.Grid, flags: Mapping[tuple[str, str], list[str]], stem: Path) -> list[Path]:
    """The heatmap as PNG and SVG (``figures.save``); [] when there is nothing to draw."""
    if grid.empty:
        return []
    rows, cols = grid.f1.shape
    fig, ax = plt.subplots(figsize=(max(5.0, 0.75 * cols + 3.0), max(2.2, 0.32 * rows + 1.6)))
    labels = grid.f1.apply(
        lambda column: [
            "" if pd.isna(v) else f"{v:.2f}" + ("!" if (c, column.name) in flags else "")
            for c, v in zip(grid.f1.index, column)
        ]
    )
    sns.heatmap(
        grid.f1.astype(float),
        ax=ax,
        vmin=0,
        vmax=1,
        cmap=heatmap.CMAP,
        annot=labels.to_numpy() if rows * cols <= 900 else False,
        fmt="",
        annot_kws={"fontsize": 7},
        cbar_kws={"label": "F1", "shrink": 0.8},
        linewidths=0.5,
        linecolor="white",
    )
    ax.set_xticks(np.arange(cols) + 0.5, [f"{k} ({grid.dimension.get(k, '')})" for k in grid.f1.columns])
    ax.tick_params(axis="x", labelrotation=60, labelsize=7)
    ax.tick_params(axis="y", labelrotation=0, labelsize=7)
    ax.set_xlabel("task/dataset (dimension)")
    ax.set_ylabel("configuration")
    title = "F1 by configuration and dataset"
    if flags:
        title += " (! = answer-quality warning)"
    ax.set_title(title, fontsize=10)
    return save(fig, stem)


def draw_all(analysis: Analysis, directory: Path) -> dict[str, list[Path]]:
    """Every figure of the report; a name maps to [] when it had nothing to draw."""
    directory.mkdir(parents=True, exist_ok=True)
    c = analysis.correction
    pairs = (
        analysis.strategy_pairs.assign(
            pair=analysis.strategy_pairs["strategy_a"] + " vs " + analysis.strategy_pairs["strategy_b"]
        )
        if not analysis.strategy_pairs.empty
        else analysis.strategy_pairs
    )
    grid = heatmap.f1_grid(analysis)
    flags = heatmap.flags_of(analysis.results)
    return {
        "heatmap": draw_heatmap(grid, flags, directory / "heatmap_f1"),
        "rq1": rq1_bars(analysis.rq1, directory / "rq1_transfer", c),
        "rq2": rq2_heatmaps(analysis.rq2, directory / "rq2_spearman"),
        "rq3_strategies": outcome_bars_by_dimension(
            pairs, "pair", directory / "rq3_strategy_pairs", c, "strategy a vs strategy b over (model, dataset) cells"
        ),
        "rq3_moe": outcome_bars_by_dimension(
            analysis.dense_vs_moe, "family", directory / "rq3_dense_vs_moe", c, "MoE vs dense within each family"
        ),
        "size": size_curves(analysis.size_curves, directory / "rq3_size_curves"),
        "errors": error_bars(analysis.errors, directory / "error_types"),
        "top_labels": top_labels(analysis.top_gold, directory / "top_labels_base_vs_t2c"),
    }
