"""The report's headline numbers: F1 by configuration x dataset, answer-quality flags, generalization gaps.

* :func:`f1_grid`: F1 and its bootstrap interval, rows grouped by model then strategy (the
  runs' order), columns by task then dimension (base first);
* :func:`quality_flags`: cells where parse failures, truncated answers, empty answers or
  served-model mismatches exceed ``warn_rate`` (the run-side rule of :mod:`src.runs.closing_lines`);
* :func:`generalization_gap`: shifted-set F1 minus base F1 per configuration, each with a
  calibrated test (:mod:`src.scoring.calibrated`): paired on the instances both sets hold
  (the derived sets keep base ids but are drawn from another subset, so the sentences only one
  side holds are counted beside as ``dropped`` and ``added``, never in the gap), a two-sample
  document permutation test when they share none; the analysis's multiple-comparison
  correction runs over all gap cells;
* the heatmap as a coloured HTML table (for report.html) and a CSV; its PNG is
  :func:`src.report.figures.draw_heatmap`.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from src.core import values
from src.core.settings import config_default
from src.report import comparisons, rq
from src.rounding import rounded
from src.runs.closing_lines import WATCHED
from src.scoring.calibrated import compare_documents, compare_unpaired
from src.scoring.clustered import resampling_units
from src.scoring.verdicts import EQUIVALENT, INCONCLUSIVE
from src.study import TASK_ORDER

if TYPE_CHECKING:
    from src.report.analysis import Analysis

FLAG = "\u26a0"  # ⚠
SIGNIFICANT, RAW_ONLY = "*", "\u00b0"  # corrected p < alpha; raw p < alpha only
EQUIVALENT_MARK = "\u2248"  # ≈: shown equivalent (corrected TOST p < alpha)
CMAP = "RdYlGn"


def default_warn_rate() -> float:
    """``warn_rate`` of conf/config.yaml, checked as a run checks it: for runs that logged none."""
    return values.rate(config_default("warn_rate"), "warn_rate")


def run_warn_rates(runs: pd.DataFrame) -> dict[str, float]:
    """Each configuration's threshold: the ``warn_rate`` its run was made with (a param), so a run's
    ``warn_rate=`` override is the one its cells are flagged under; the default for runs without one."""
    default = None
    rates = {}
    for config in runs.index:
        value = runs.loc[config, "warn_rate"] if "warn_rate" in runs.columns else None
        if value is None or (isinstance(value, float) and np.isnan(value)):
            default = default_warn_rate() if default is None else default
            value = default
        rates[str(config)] = float(value)
    return rates


def flags_of(results) -> dict[tuple[str, str], list[str]]:
    """The cells of ``results`` (a :class:`~src.report.results.RunResults`) above their run's warn_rate."""
    return quality_flags(results.scores, run_warn_rates(results.runs))


@dataclass
class Grid:
    """F1 with its interval: configurations x ``task/dataset`` (NaN where not scored)."""

    f1: pd.DataFrame
    low: pd.DataFrame
    high: pd.DataFrame
    dimension: dict[str, str]  # task/dataset -> "base" or its dimension

    @property
    def empty(self) -> bool:
        return self.f1.empty or bool(self.f1.isna().all().all())


def column_order(keys, dimensions: Mapping[str, list[str]]) -> list[tuple[str, str]]:
    """(key, dimension) by task (study order), base first, then the dimensions' order."""
    of = {key: dim for dim, members in dimensions.items() for key in members}
    dims = list(dimensions)
    study_order = rq.ordered_keys(keys)

    def rank(key: str) -> tuple:
        task, dataset = key.split("/", 1)
        dim = "base" if dataset == "base" and key not in of else of.get(key, "other")
        return (
            TASK_ORDER.index(task) if task in TASK_ORDER else len(TASK_ORDER),
            task,
            -1 if dim == "base" else (dims.index(dim) if dim in dims else len(dims)),
            study_order.index(key),
        )

    ordered = sorted(set(keys), key=rank)
    return [(k, "base" if k.endswith("/base") and k not in of else of.get(k, "other")) for k in ordered]


def f1_grid(analysis: Analysis) -> Grid:
    """Every configuration (prompted, then fine-tuned) x every scored dataset."""
    scores = analysis.results.scores
    configs = list(analysis.results.runs.index)
    f1 = rq.score_table(scores, configs, "f1")
    if f1.empty or not len(f1.columns):
        empty = pd.DataFrame(index=configs)
        return Grid(empty, empty, empty, {})
    columns = column_order(f1.columns, analysis.dimensions)
    keys = [k for k, _ in columns]
    f1 = f1.reindex(columns=keys)
    f1 = f1.loc[~f1.isna().all(axis=1)]

    def aligned(metric: str) -> pd.DataFrame:
        table = rq.score_table(scores, configs, metric)
        return table.reindex(index=f1.index, columns=keys) if not table.empty else f1 * np.nan

    return Grid(f1, aligned("f1_ci_low"), aligned("f1_ci_high"), dict(columns))


def quality_flags(scores: pd.DataFrame, warn_rate: float | Mapping[str, float]) -> dict[tuple[str, str], list[str]]:
    """(configuration, task/dataset) -> what exceeds its ``warn_rate`` (one for all, or per
    configuration) there, e.g. ``["parse failures 12.5%"]``."""
    flags: dict[tuple[str, str], list[str]] = {}
    for row in scores.to_dict("records"):
        rate = warn_rate if isinstance(warn_rate, (int, float)) else warn_rate[row["config"]]
        over = [
            f"{label} {row[metric]:.1%}"
            for metric, label in WATCHED
            if isinstance(row.get(metric), (int, float)) and not np.isnan(row[metric]) and row[metric] > rate
        ]
        if over:
            flags[row["config"], f"{row['task']}/{row['dataset']}"] = over
    return flags


def heatmap_long(grid: Grid, flags: Mapping[tuple[str, str], list[str]], runs: pd.DataFrame) -> pd.DataFrame:
    """The heatmap as rows (the CSV beside it): configuration, model, strategy, dataset, dimension, F1, CI, flags."""
    rows = []
    for config in grid.f1.index:
        for key in grid.f1.columns:
            value = grid.f1.loc[config, key]
            if pd.isna(value):
                continue
            rows.append(
                {
                    "configuration": config,
                    "model": runs.loc[config, "model"] if config in runs.index else None,
                    "strategy": runs.loc[config, "strategy"] if config in runs.index else None,
                    "dataset": key,
                    "dimension": grid.dimension.get(key),
                    "f1": value,
                    "f1_ci_low": grid.low.loc[config, key],
                    "f1_ci_high": grid.high.loc[config, key],
                    "flags": "; ".join(flags.get((config, key), [])),
                }
            )
    columns = ["configuration", "model", "strategy", "dataset", "dimension", "f1", "f1_ci_low", "f1_ci_high", "flags"]
    return pd.DataFrame(rows, columns=columns)


def _rgb(value: float) -> tuple[str, str]:
    """Background and text colour of an F1 in [0, 1]."""
    import matplotlib

    r, g, b, _ = matplotlib.colormaps[CMAP](float(np.clip(value, 0, 1)))
    text = "#000" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "#fff"
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}", text


def heatmap_html(grid: Grid, flags: Mapping[tuple[str, str], list[str]], link: Callable[[str, str], str | None]) -> str:
    """A coloured table: a header row of dimensions over one of datasets; the interval on hover;
    each cell a link (``link(config, key)``, None for none)."""
    keys = list(grid.f1.columns)
    spans: list[tuple[str, int]] = []
    for key in keys:
        label = f"{key.split('/', 1)[0]} \u00b7 {grid.dimension.get(key, '')}"
        spans = spans[:-1] + [(label, spans[-1][1] + 1)] if spans and spans[-1][0] == label else spans + [(label, 1)]
    head = "".join(f'<th colspan="{n}">{html.escape(label)}</th>' for label, n in spans)
    cols = "".join(f"<th>{html.escape(key.split('/', 1)[1])}</th>" for key in keys)
    body = []
    for config in grid.f1.index:
        cells = []
        for key in keys:
            value = grid.f1.loc[config, key]
            if pd.isna(value):
                cells.append('<td class="na" title="not scored">\u2013</td>')
                continue
            low, high = grid.low.loc[config, key], grid.high.loc[config, key]
            title = f"{config} on {key}: F1 {value:.3f}"
            if not (pd.isna(low) or pd.isna(high)):
                title += f", 95% CI [{low:.3f}, {high:.3f}]"
            flagged = flags.get((config, key))
            if flagged:
                title += "; " + ", ".join(flagged)
            text = f"{value:.2f}" + (FLAG if flagged else "")
            target = link(config, key)
            if target:
                text = f'<a href="{html.escape(target)}">{text}</a>'
            bg, fg = _rgb(value)
            cells.append(f'<td style="background:{bg};color:{fg}" title="{html.escape(title)}">{text}</td>')
        body.append(f"<tr><th>{html.escape(str(config))}</th>{''.join(cells)}</tr>")
    return (
        '<table class="heatmap" id="heatmap"><thead><tr><th rowspan="2">configuration</th>'
        f"{head}</tr><tr>{cols}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def gap_test(settings, ref, tgt, config: str, seed):
    """The calibrated test of shifted (``tgt``) minus base (``ref``) for one configuration under the
    analysis ``settings`` (alpha, margin, power, unit), and (paired, shared, dropped, added)."""
    options = (settings.alpha, settings.margin, settings.power)
    ids_ref, ids_tgt = set(ref.ids[config]), set(tgt.ids[config])
    shared = sorted(ids_ref & ids_tgt)
    composition = (len(shared), len(ids_ref - ids_tgt), len(ids_tgt - ids_ref))
    if shared:
        pair = resampling_units(
            np.stack([tgt.stacked([config], shared)[0], ref.stacked([config], shared)[0]]), shared, settings.unit
        )
        return compare_documents(pair[0], pair[1], *options, seed=seed), (True, *composition)
    units_ref = resampling_units(ref.stats[config], list(ref.ids[config]), settings.unit)
    units_tgt = resampling_units(tgt.stats[config], list(tgt.ids[config]), settings.unit)
    return compare_unpaired(units_tgt, units_ref, *options, seed=seed), (False, *composition)


def generalization_gap(analysis: Analysis) -> pd.DataFrame:
    """Per configuration and shifted set: F1 (shifted) - F1 (its base), its calibrated test and verdict.

    ``f1_reference``/``f1_shifted`` are the logged F1 on each whole set; ``gap`` is the difference
    the test is about: on the shared instances when the sets share any (``paired``), else of the
    whole sets. ``shared``/``dropped``/``added`` say which instances the two sets hold (dropped: only
    base; added: only the shifted set). Below the minimum documents there is no p, no MDD and the
    verdict is inconclusive (``reason``).
    """
    datasets = analysis.results.datasets
    of = {key: dim for dim, members in analysis.dimensions.items() for key in members}
    logged = rq.score_table(analysis.results.scores, list(analysis.results.runs.index))
    rows = []
    for reference, target in rq.reference_links(list(datasets)):
        ref, tgt = datasets[reference], datasets[target]
        for config in [c for c in tgt.configs if c in ref.configs]:
            generator = comparisons.dataset_seed(analysis.seed, f"{reference}>{target}", [config])
            test, (paired, shared, dropped, added) = gap_test(analysis.settings, ref, tgt, config, generator)
            f1_ref = logged.loc[config, reference] if reference in logged.columns else np.nan
            f1_tgt = logged.loc[config, target] if target in logged.columns else np.nan
            rows.append(
                {
                    "configuration": config,
                    "dimension": of.get(target, "other"),
                    "dataset": target,
                    "reference": reference,
                    "f1_reference": test.f1_b if pd.isna(f1_ref) else f1_ref,
                    "f1_shifted": test.f1_a if pd.isna(f1_tgt) else f1_tgt,
                    "gap": test.delta,
                    "paired": paired,
                    "shared": shared,
                    "dropped": dropped,
                    "added": added,
                    "documents": test.documents,
                    "ci_low": rounded(test.ci_low),
                    "ci_high": rounded(test.ci_high),
                    "mdd": rounded(test.mdd),
                    "p_value": test.p_value,
                    "p_equivalent": test.p_equivalent,
                    "reason": test.reason or "",
                }
            )
    columns = [
        "configuration",
        "dimension",
        "dataset",
        "reference",
        "f1_reference",
        "f1_shifted",
        "gap",
        "paired",
        "shared",
        "dropped",
        "added",
        "documents",
        "ci_low",
        "ci_high",
        "mdd",
        "p_value",
        f"p_{analysis.correction}",
        "p_equivalent",
        f"p_equivalent_{analysis.correction}",
        f"verdict_{analysis.correction}",
        "mark",
        "reason",
    ]
    if not rows:
        return pd.DataFrame(columns=columns)
    table = pd.DataFrame(rows)
    correct = comparisons.CORRECTIONS[analysis.correction]
    c, alpha = analysis.correction, analysis.alpha
    table[f"p_{c}"] = correct(table["p_value"].to_numpy(dtype=np.float64))
    table[f"p_equivalent_{c}"] = correct(table["p_equivalent"].to_numpy(dtype=np.float64))
    table[f"verdict_{c}"] = [
        ("better" if gap > 0 else "worse") if adj < alpha and gap != 0 else EQUIVALENT if eq < alpha else INCONCLUSIVE
        for gap, adj, eq in zip(table["gap"], table[f"p_{c}"], table[f"p_equivalent_{c}"])
    ]
    table["mark"] = [
        SIGNIFICANT if adj < alpha else RAW_ONLY if raw < alpha else EQUIVALENT_MARK if verdict == EQUIVALENT else ""
        for raw, adj, verdict in zip(table["p_value"], table[f"p_{c}"], table[f"verdict_{c}"])
    ]
    return table[columns]


def gap_matrix(gaps: pd.DataFrame) -> pd.DataFrame:
    """Configurations x ``dimension: reference -> dataset`` cells ``-0.123*`` (the report's display)."""
    if gaps.empty:
        return pd.DataFrame()
    labels = [
        f"{d}: {t}" if r.endswith("/base") and r.split("/")[0] == t.split("/")[0] else f"{d}: {t} vs {r}"
        for d, t, r in zip(gaps["dimension"], gaps["dataset"], gaps["reference"])
    ]
    cells = [f"{g:+.3f}{m}" for g, m in zip(gaps["gap"], gaps["mark"])]
    frame = pd.DataFrame({"configuration": gaps["configuration"], "column": labels, "cell": cells})
    order_rows = list(dict.fromkeys(gaps["configuration"]))
    dims = list(dict.fromkeys(gaps["dimension"]))
    order_cols = sorted(dict.fromkeys(labels), key=lambda label: (dims.index(label.split(":")[0]), label))
    table = frame.pivot(index="configuration", columns="column", values="cell").reindex(
        index=order_rows, columns=order_cols
    )
    table.columns.name = None
    return table.fillna("\u2013")
