"""Tables (CSV + markdown) and the written report (markdown + HTML) from a computed analysis.

Summaries are generated from the numbers: every sentence states a computed value, and
a section without enough input says what it needs instead of concluding anything.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from src.report import rq
from src.report.analysis import finetuned_pairs, instance_table, pairwise_long
from src.study import TASK_ORDER

if TYPE_CHECKING:
    from src.report.analysis import Analysis

DETAIL_METRICS = (
    "f1",
    "f1_ci_low",
    "f1_ci_high",
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
CORRECTION_NAMES = {"none": "raw p", "holm": "Holm", "bh": "Benjamini-Hochberg"}
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


def with_ci(scores: pd.DataFrame, configs: list[str], keys: list[str] | None = None) -> pd.DataFrame:
    """Configs x datasets cells ``F1 [low, high]`` from the logged metrics."""
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
        (directory / f"{name}.md").write_text(markdown_table(table, index) + "\n", encoding="utf-8")
    return csv


def configurations_table(analysis: Analysis) -> pd.DataFrame:
    runs = analysis.study.runs
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
        "git_commit",
        "data_version",
        "run_id",
    ]
    table = runs[[c for c in columns if c in runs.columns]].copy()
    table.index.name = "configuration"
    return table


def scorer_table(scores: pd.DataFrame) -> pd.DataFrame | None:
    """F1 under every scorer variant logged (columns in registry order), or None when only the primary was."""
    from src.scoring.variants import PRIMARY, VARIANTS

    extra = [name for name in VARIANTS if name != PRIMARY and f"{name}.f1" in scores.columns]
    if not extra:
        return None
    table = scores[["config", "task", "dataset", "f1", *[f"{name}.f1" for name in extra]]].copy()
    table = table.dropna(subset=[f"{name}.f1" for name in extra], how="all")
    table.columns = ["configuration", "task", "dataset", PRIMARY, *extra]
    return table.reset_index(drop=True)


def write_tables(analysis: Analysis, directory: Path) -> dict[str, Path]:
    """Every table as CSV (full precision) and markdown (3 decimals); returns name -> CSV path."""
    study = analysis.study
    scores = study.scores
    prompted = analysis.groups["all"]
    finetuned = [c for c in study.runs.index if study.runs.loc[c, "kind"] == "finetuned"]
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
    return written


def _figure(lines: list[str], drawn: Mapping[str, list[Path]], name: str, caption: str, out: Path) -> None:
    for png in [p for p in drawn.get(name) or [] if p.suffix == ".png"]:
        lines.append(f"![{caption}]({png.relative_to(out).as_posix()})")
        lines.append("")


def _rq1_sentences(analysis: Analysis) -> list[str]:
    table, alpha, lines = analysis.rq1, analysis.alpha, []
    if table.empty:
        return ["No generalization set has a base set to pair with, so RQ1 has nothing to compare."]
    for group in dict.fromkeys(table["group"]):
        part = table[table["group"] == group]
        for c in analysis.corrections:
            rows = part[part["correction"] == c]
            pooled = rows[rows["target"] == "all"].iloc[0]
            links = rows[rows["target"] != "all"]
            name = CORRECTION_NAMES.get(c, c)
            if pooled["pairs"] == 0:
                lines.append(
                    f"- **{group}, {name}**: no ordered pair of configurations is significantly better on a "
                    f"base set at alpha = {alpha} (0 pairs over {len(links)} links), so there is nothing to follow."
                )
                continue
            sentence = (
                f"- **{group}, {name}**: over {len(links)} base-to-generalization links, "
                f"{int(pooled['pairs'])} (pair, link) cases start significantly better on base; on the "
                f"generalization set they stay better in {pct(pooled['better'])}, are almost equal in "
                f"{pct(pooled['equal'])} and turn worse in {pct(pooled['worse'])}."
            )
            defined = links[links["pairs"] > 0]
            if len(defined) > 1 and defined["better"].nunique() > 1:
                top = defined.loc[defined["better"].idxmax()]
                low = defined.loc[defined["better"].idxmin()]
                sentence += (
                    f" The share staying better is highest on {top['target']} ({pct(top['better'])} of "
                    f"{int(top['pairs'])}) and lowest on {low['target']} ({pct(low['better'])} of {int(low['pairs'])})."
                )
            elif len(defined) > 1:
                sentence += f" The share staying better is {pct(defined['better'].iloc[0])} on each of the {len(defined)} links."
            lines.append(sentence)
    return lines


def _rq2_sentences(analysis: Analysis) -> list[str]:
    lines = []
    for group, corr in analysis.rq2.items():
        if corr.rho.isna().all().all():
            lines.append(f"- **{group}** ({len(corr.configs)} configurations): no correlation computed: {corr.reason}.")
            continue
        rho = corr.rho.to_numpy(dtype=np.float64)
        upper_i, upper_j = np.triu_indices(len(rho), 1)
        values = rho[upper_i, upper_j]
        valid = ~np.isnan(values)
        best, worst = np.nanargmax(values), np.nanargmin(values)
        names = list(corr.rho.columns)
        raw = corr.p_value.to_numpy(dtype=np.float64)[upper_i, upper_j]
        adjusted = corr.p_adjusted.to_numpy(dtype=np.float64)[upper_i, upper_j]
        sentence = (
            f"- **{group}** ({len(corr.configs)} configurations): mean rho over {int(valid.sum())} dataset pairs is "
            f"{fmt(rq.mean_off_diagonal(corr.rho))}; highest {names[upper_i[best]]} vs {names[upper_j[best]]} "
            f"({fmt(values[best])}), lowest {names[upper_i[worst]]} vs {names[upper_j[worst]]} ({fmt(values[worst])}); "
            f"{int(np.sum(raw < analysis.alpha))} of {int(valid.sum())} dataset pairs have p < {analysis.alpha}, "
            f"{int(np.sum(adjusted < analysis.alpha))} after {CORRECTION_NAMES.get(analysis.correction)}."
        )
        if corr.reason:
            sentence += f" Missing values: {corr.reason}."
        lines.append(sentence)
    return lines


def _ties(values: pd.Series, top: float) -> str:
    others = int(np.isclose(values, top).sum()) - 1
    return f"; {others} other comparison(s) share that value" if others > 0 else ""


def _pair_sentences(table: pd.DataFrame, label, subject: str, corrections) -> list[str]:
    """Per correction: the comparison with the most significant wins, the most losses, and the tie share."""
    lines = []
    for c in corrections:
        rows = table[(table["dimension"] == "all") & (table["correction"] == c) & (table["pairs"] > 0)]
        if rows.empty:
            continue
        best = rows.loc[rows["better"].idxmax()]
        worst = rows.loc[rows["worse"].idxmax()]
        equal = rows["n_equal"].sum() / rows["pairs"].sum()
        sentence = (
            f"- **{CORRECTION_NAMES.get(c, c)}**, summed over dimensions ({int(rows['pairs'].sum())} "
            f"{subject}, {pct(equal)} almost equal): "
        )
        if best["better"] > 0:
            sentence += (
                f"the largest share of significant wins is {label(best)} (better in {pct(best['better'])} "
                f"of {int(best['pairs'])}{_ties(rows['better'], best['better'])})"
            )
        else:
            sentence += "no comparison is significantly better for the first side"
        if worst["worse"] > 0:
            sentence += (
                f"; the largest share of significant losses is {label(worst)} (worse in "
                f"{pct(worst['worse'])} of {int(worst['pairs'])}{_ties(rows['worse'], worst['worse'])})."
            )
        else:
            sentence += "; none is significantly worse."
        lines.append(sentence)
    return lines


def _size_sentences(analysis: Analysis) -> list[str]:
    lines = []
    for name, models in analysis.series.items():
        curves = analysis.size_curves[analysis.size_curves["series"] == name]
        trend = analysis.size_trend[analysis.size_trend["series"] == name]
        sizes = sorted(set(curves["params_total_b"]))
        defined = trend.dropna(subset=["rho"])
        sentence = (
            f"- **{name}** ({len(models)} models, {fmt(sizes[0], 1)}B to {fmt(sizes[-1], 1)}B parameters): "
            f"mean F1 over strategies and datasets is {fmt(curves[curves['params_total_b'] == sizes[0]]['f1'].mean())} "
            f"at the smallest size and {fmt(curves[curves['params_total_b'] == sizes[-1]]['f1'].mean())} at the largest."
        )
        if not defined.empty:
            sentence += (
                f" Size and F1 have Spearman rho > 0 on {int((defined['rho'] > 0).sum())} of {len(defined)} "
                f"datasets (mean rho {fmt(defined['rho'].mean())})."
            )
        lines.append(sentence)
    return lines


def _error_sentences(errors: pd.DataFrame) -> list[str]:
    lines = []
    defined = errors.dropna(subset=["share_missing"])
    if not defined.empty:
        shares = defined[["share_missing", "share_spurious", "share_boundary"]].to_numpy()
        largest = np.isclose(shares, shares.max(axis=1, keepdims=True)).sum(axis=0)
        top = defined.loc[defined["share_missing"].idxmax()]
        lines.append(
            f"- Over {len(defined)} datasets, the largest (or tied largest) error type is missing spans on "
            f"{int(largest[0])}, spurious predictions on {int(largest[1])} and boundary mismatches on "
            f"{int(largest[2])}; the highest missing share is {pct(top['share_missing'])} on {top['dataset']}."
        )
    for task in ("timex", "eventx", "comp"):
        part = errors[errors["dataset"].str.startswith(task + "/")]
        clinical = part[part["dataset"] == f"{task}/t2c"]
        others = part[part["dataset"] != f"{task}/t2c"]
        if clinical.empty or others.empty:
            continue
        row = clinical.iloc[0]
        lines.append(
            f"- **{task}/t2c**: missing {pct(row['share_missing'])}, spurious {pct(row['share_spurious'])}, boundary "
            f"{pct(row['share_boundary'])} of errors; over the other {len(others)} {task} sets the mean shares are "
            f"{pct(others['share_missing'].mean())}, {pct(others['share_spurious'].mean())} and "
            f"{pct(others['share_boundary'].mean())}."
        )
    return lines


def _top_label_sentences(top_gold: Mapping[str, dict]) -> list[str]:
    lines = []
    for task in ("timex", "eventx"):
        base, clinical = top_gold.get(f"{task}/base"), top_gold.get(f"{task}/t2c")
        if not base or not clinical:
            continue
        shared = {t for t, _ in base["top"]} & {t for t, _ in clinical["top"]}
        (b_text, b_count), (c_text, c_count) = base["top"][0], clinical["top"][0]
        lines.append(
            f'- **{task}**: the most frequent base gold string is "{b_text}" ({pct(b_count / base["spans"])} of '
            f'{base["spans"]} spans), the most frequent t2c one is "{c_text}" ({pct(c_count / clinical["spans"])} '
            f"of {clinical['spans']}); {len(shared)} of the top {len(base['top'])} base strings are also among the "
            f"top {len(clinical['top'])} t2c strings."
        )
    return lines


def run_link(uri: str, experiment_id: str, run_id: str) -> str:
    """A link into the MLflow UI when the store is a server, else the bare run id."""
    if uri.startswith(("http://", "https://")):
        return f"[{run_id}]({uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id})"
    return f"`{run_id}`"


def _method_lines(analysis: Analysis) -> list[str]:
    """How the numbers below were computed, with this run's settings."""
    name = CORRECTION_NAMES.get(analysis.correction, analysis.correction)
    dims = "; ".join(f"{d}: {', '.join(keys)}" for d, keys in analysis.dimensions.items())
    return [
        "How to read the numbers:",
        "",
        "- Paired bootstrap per dataset, each pair of configurations on the instances both were scored on: "
        f"configurations scored on the same instances share one resample matrix of {analysis.resamples} rows, and a "
        "pair across two instance sets uses their intersection (one matrix per distinct intersection); the number "
        "of instances of every comparison is under *Instances per comparison*. i is *better* than j when "
        f"p(i better) < {analysis.alpha}, *worse* when p(j better) < {analysis.alpha}, else *almost equal*.",
        f"- {name} adjusts the p-value of each pair's observed direction over the family of all pairwise tests "
        f"of prompted configurations on all datasets ({analysis.prompted.pairs} tests); the fine-tuned models' "
        f"comparisons are a family of their own ({analysis.finetuned.pairs} tests). Its outcomes are shown beside "
        "the raw ones.",
        "- RQ1 follows ordered pairs better on a base set to each generalization set of the same task "
        "(comp/base to both timex/base and eventx/base); a pair belongs to a group when both configurations do, "
        "and counts on a link when it was tested on both sets.",
        f"- RQ3 counts (model, dataset) cells per dimension ({dims}); dimension *all* sums them.",
        "",
    ]


def _instance_lines(analysis: Analysis) -> list[str]:
    """Per family: the n of its comparisons, dataset by dataset where they differ."""
    table = instance_table(analysis)
    lines = []
    for family in analysis.families:
        part = table[table["family"] == family.name]
        if part.empty:
            continue
        mixed, uniform = [], []
        for key, rows in part.groupby("dataset", sort=False):
            tested = rows[rows["instances"] > 0]
            if len(rows) == 1 and not tested.empty:
                uniform.append(f"{key} ({int(tested['instances'].iloc[0])})")
            else:
                mixed.append(
                    f"{key}: "
                    + ", ".join(
                        f"{int(r.pairs)} pair(s) {'share no instance (untested)' if r.instances == 0 else f'on {int(r.instances)}'}"
                        for r in rows.itertuples(index=False)
                    )
                )
        sentence = f"- **{family.name}** ({family.pairs} tests): "
        if uniform:
            sentence += "every pair compared on the same instances on " + ", ".join(uniform)
        if mixed:
            sentence += (
                ("; " if uniform else "") + "pairs compared on different numbers of instances on " + "; ".join(mixed)
            )
        lines.append(sentence + ".")
    return lines


def _finetuned_lines(analysis: Analysis, tables: Mapping[str, Path]) -> list[str]:
    family = analysis.finetuned
    lines = ["### Fine-tuned models compared (Figure 11)", ""]
    if not family.tests:
        return lines + [f"Needs at least two fine-tuned models scored on one dataset; here: {len(family.configs)}.", ""]
    pairs = finetuned_pairs(analysis)
    c = analysis.correction
    counts = []
    for correction, column in (("none", "outcome"), (c, f"outcome_{c}")):
        significant = int(pairs[column].isin(["better", "worse"]).sum())
        counts.append(f"{significant} significant with {CORRECTION_NAMES.get(correction, correction)}")
    lines += [
        f"Paired bootstrap of fine-tuned model a vs b on each dataset, on the instances both were scored on "
        f"(column `instances`): {len(pairs)} tests over {len(family.tests)} datasets, " + " and ".join(counts) + ".",
        "",
        tables["finetuned_pairwise"].with_suffix(".md").read_text(encoding="utf-8"),
        "",
    ]
    return lines


def _provenance_lines(analysis: Analysis) -> list[str]:
    study = analysis.study
    table = analysis.provenance.copy()
    lines = ["## Provenance", ""]
    if study.checked:
        lines += [
            f"Every number above comes from exactly the runs the pipeline's summary files name ({len(table)} "
            "summaries, runs fetched by id, each FINISHED in this experiment); runs logged by hand or by other "
            "profiles are not read. Data versions were checked: the raw corpora's hash is the same for every "
            "run, and runs scored on the same datasets have the same dataset digest.",
            "",
        ]
    else:
        lines += ["These runs were not read through the pipeline's summaries, so their provenance was not checked.", ""]
    dirty = [config for config, flag in table["dirty"].items() if flag]
    if dirty:
        lines += [
            f"**Uncommitted changes**: the runs of {', '.join(dirty)} were logged from a working tree with "
            "uncommitted changes (commit ending in `-dirty`), so their commit alone does not reproduce them.",
            "",
        ]
    table["run_id"] = [run_link(study.tracking_uri, study.experiment_id, r) for r in table["run_id"]]
    table["git_commit"] = [f"`{c}`" if isinstance(c, str) else c for c in table["git_commit"]]
    table["data_version"] = [f"`{v}`" if isinstance(v, str) else v for v in table["data_version"]]
    return lines + [markdown_table(table), ""]


def build_report(analysis: Analysis, drawn: Mapping[str, list[Path]], tables: Mapping[str, Path], out: Path) -> str:
    """The report's markdown text."""
    study, c = analysis.study, analysis.correction
    cname = CORRECTION_NAMES.get(c, c)
    runs = study.runs
    lines = [
        "# Temporal extraction generalization study: results",
        "",
        f"Experiment `{study.experiment_name}` (id {study.experiment_id}) at `{study.tracking_uri}`: "
        f"{len(runs)} configurations ({len(analysis.groups['all'])} prompted, "
        f"{int((runs['kind'] == 'finetuned').sum())} fine-tuned), {len(analysis.tests)} datasets with paired tests, "
        f"{analysis.resamples} bootstrap resamples per dataset (seed {analysis.seed}), alpha = {analysis.alpha}, "
        f"correction: {cname} over all {analysis.prompted.pairs} pairwise tests of prompted configurations "
        f"(and {analysis.finetuned.pairs} of fine-tuned models, a family of their own).",
        "",
    ]
    lines += _method_lines(analysis)
    if study.notes:
        lines += ["Input notes:", ""] + [f"- {note}" for note in study.notes] + [""]
    lines += [
        "## Results per dataset",
        "",
        "F1 (word-LCS micro-F1) with its 95% bootstrap interval, as logged in MLflow.",
        "",
    ]
    for task in TASK_ORDER:
        if f"results_{task}" in tables:
            lines += [
                f"### {task}",
                "",
                Path(tables[f"results_{task}"]).with_suffix(".md").read_text(encoding="utf-8"),
                "",
            ]
    if "finetuned" in tables:
        lines += [
            "### Fine-tuned models (Table 10)",
            "",
            tables["finetuned"].with_suffix(".md").read_text(encoding="utf-8"),
            "",
        ]
        lines += _finetuned_lines(analysis, tables)
    if "scorers" in tables:
        lines += [
            "### The paper's formula beside the study's released scorer",
            "",
            "Primary F1 (`paper`: word LCS / max length, one Hungarian matching) and the released scorer's "
            'variants (`src/scoring/variants.py`; README, "Fidelity with the study"), on the same outputs:',
            "",
            tables["scorers"].with_suffix(".md").read_text(encoding="utf-8"),
            "",
        ]
    details = [k for k in tables if k.startswith("dataset_")]
    lines += [
        "Per-dataset details (precision, recall, strict/relaxed F1, parse failures, errors): "
        + ", ".join(f"[{k[len('dataset_') :]}](tables/{tables[k].name})" for k in details)
        + ".",
        "",
    ]
    lines += [
        "## Instances per comparison",
        "",
        "Each pair of configurations is compared on the instances both were scored on; per family and dataset, "
        "the number of instances and of pairs compared on them (`tables/comparisons.csv`):",
        "",
    ]
    lines += _instance_lines(analysis) + [""]
    if "comparisons" in tables and not instance_table(analysis).empty:
        lines += [Path(tables["comparisons"]).with_suffix(".md").read_text(encoding="utf-8"), ""]
    lines += ["## RQ1: does a significant difference on base carry over?", ""]
    lines += _rq1_sentences(analysis) + [""]
    rq1 = (
        analysis.rq1.pivot_table(
            index=["group", "reference", "target"],
            columns="correction",
            values=["pairs", "better", "equal", "worse"],
            sort=False,
        )
        if not analysis.rq1.empty
        else None
    )
    if rq1 is not None:
        rq1.columns = [f"{value} ({CORRECTION_NAMES.get(corr, corr)})" for value, corr in rq1.columns]
        lines += [markdown_table(rq1), ""]
    _figure(lines, drawn, "rq1", "RQ1 outcome shares", out)
    lines += ["## RQ2: rank correlation between datasets", ""] + _rq2_sentences(analysis) + [""]
    for group, corr in analysis.rq2.items():
        if not corr.rho.isna().all().all():
            lines += [f"Spearman rho, {group}:", "", markdown_table(corr.rho.rename_axis("dataset"), digits=2), ""]
    _figure(lines, drawn, "rq2", "RQ2 Spearman heatmaps", out)
    lines += ["## RQ3: strategies, architecture, size and errors", "", "### Strategy pairs", ""]
    pairs = analysis.strategy_pairs
    if pairs.empty or pairs["pairs"].sum() == 0:
        lines += ["Needs at least one model with two strategies scored on a generalization set; none here.", ""]
    else:
        lines += _pair_sentences(
            pairs, lambda r: f"{r['strategy_a']} vs {r['strategy_b']}", "model-dataset cells", analysis.corrections
        ) + [""]
        summed = pairs[pairs["dimension"] == "all"].pivot_table(
            index=["strategy_a", "strategy_b"],
            columns="correction",
            values=["pairs", "better", "equal", "worse"],
            sort=False,
        )
        summed.columns = [f"{v} ({CORRECTION_NAMES.get(k, k)})" for v, k in summed.columns]
        lines += [
            "Summed over dimensions (per dimension: `tables/rq3_strategy_pairs.csv`):",
            "",
            markdown_table(summed),
            "",
        ]
        _figure(lines, drawn, "rq3_strategies", "RQ3 strategy pairs", out)
    lines += ["### Dense vs MoE within a family", ""]
    if analysis.dense_vs_moe.empty:
        lines += [f"This comparison {analysis.dense_vs_moe_reason}.", ""]
    else:
        lines += _pair_sentences(
            analysis.dense_vs_moe,
            lambda r: f"MoE vs dense in family {r['family']}",
            "comparisons",
            analysis.corrections,
        )
        lines += [
            "",
            markdown_table(
                analysis.dense_vs_moe.drop(columns=[c for c in analysis.dense_vs_moe.columns if c.startswith("n_")]),
                index=False,
            ),
            "",
        ]
        _figure(lines, drawn, "rq3_moe", "RQ3 dense vs MoE", out)
    lines += ["### Model size", ""]
    if not analysis.series:
        lines += [
            "This analysis needs more models: no size series (a `size_series` param, or one family with dense "
            f"models at two or more sizes) among the {runs['model'].nunique()} model(s) here.",
            "",
        ]
    else:
        lines += _size_sentences(analysis) + [""]
        _figure(lines, drawn, "size", "F1 against model size", out)
    lines += ["### Error types", ""]
    if analysis.errors.empty:
        lines += ["No error counts were logged.", ""]
    else:
        lines += _error_sentences(analysis.errors) + ["", markdown_table(analysis.errors, index=False), ""]
        _figure(lines, drawn, "errors", "Error types per dataset", out)
    lines += ["### Base vs clinical gold labels", ""]
    if drawn.get("top_labels"):
        lines += _top_label_sentences(analysis.top_gold) + [""]
        _figure(lines, drawn, "top_labels", "Most frequent gold strings, base vs t2c", out)
    else:
        lines += ["Skipped: no `top_gold` for base and t2c in the prepared-data statistics (`stats.json`).", ""]
    lines += _provenance_lines(analysis)
    lines += ["## Configurations", ""]
    listing = configurations_table(analysis).drop(columns=["git_commit", "data_version", "run_id"], errors="ignore")
    lines += [markdown_table(listing), ""]
    return "\n".join(lines)


HTML_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Temporal extraction generalization study</title>
<style>body{{font-family:sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;line-height:1.4}}
table{{border-collapse:collapse;font-size:0.8rem;margin:0.5rem 0}}td,th{{border:1px solid #ccc;padding:2px 6px}}
img{{max-width:100%}}</style></head><body>
{body}
</body></html>
"""


def write_report(analysis: Analysis, drawn: Mapping[str, list[Path]], tables: Mapping[str, Path], out: Path) -> Path:
    """Write ``report.md`` and ``report.html`` under ``out``; returns the markdown path."""
    import markdown

    text = build_report(analysis, drawn, tables, out)
    path = out / "report.md"
    path.write_text(text, encoding="utf-8")
    body = markdown.markdown(text, extensions=["tables"])
    path.with_suffix(".html").write_text(HTML_PAGE.format(body=body), encoding="utf-8")
    return path
