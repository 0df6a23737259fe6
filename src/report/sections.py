"""The report's sections, each from the computed analysis, its tables and figures.

The sentences come from :mod:`src.report.prose`, the tables from :mod:`src.report.tables`; each
function here writes one section's markdown lines, and :func:`src.report.writer.build_report`
puts them in order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from src.report.analysis import instance_table
from src.report.browser import pages_with
from src.report.findings import Finding
from src.report.heatmap import (
    EQUIVALENT_MARK,
    FLAG,
    RAW_ONLY,
    SIGNIFICANT,
    flags_of,
    gap_matrix,
    run_warn_rates,
)
from src.report.prose import (
    CORRECTION_NAMES,
    error_sentences,
    finetuned_lines,
    instance_lines,
    method_lines,
    pair_sentences,
    rq1_sentences,
    rq2_sentences,
    size_sentences,
    top_label_sentences,
)
from src.report.tables import compact_table, configurations_table, markdown_table
from src.runs.closing_lines import WATCHED
from src.scoring.verdicts import VERDICTS
from src.study import PRIMARY_SCORER, TASK_ORDER

if TYPE_CHECKING:
    from src.report.analysis import Analysis

HEATMAP_CAPTION = "F1 by configuration and dataset"


@dataclass(frozen=True)
class Page:
    """What every section reads: the analysis, the figures drawn and tables written (by name),
    and the report's folder (links are relative to it)."""

    analysis: Analysis
    drawn: Mapping[str, list[Path]]
    tables: Mapping[str, Path]
    out: Path

    def figure(self, lines: list[str], name: str, caption: str, why: str | None = None) -> None:
        _figure(lines, self.drawn, name, caption, self.out, why)

    def table_text(self, name: str) -> str:
        """A written table's markdown twin."""
        return Path(self.tables[name]).with_suffix(".md").read_text(encoding="utf-8")


def _figure(
    lines: list[str], drawn: Mapping[str, list[Path]], name: str, caption: str, out: Path, why: str | None = None
) -> None:
    """The figure's PNG, or (``why`` given) one sentence saying why there is none: never a blank image."""
    pngs = [p for p in drawn.get(name) or [] if p.suffix == ".png"]
    for png in pngs:
        lines.append(f"![{caption}]({png.relative_to(out).as_posix()})")
        lines.append("")
    if not pngs and why:
        lines += [f"No figure: {why}.", ""]


def _join(values, limit: int = 8) -> str:
    values = [str(v) for v in dict.fromkeys(values) if v is not None and str(v) not in ("", "nan", "None")]
    shown = ", ".join(values[:limit])
    return shown + (f" and {len(values) - limit} more" if len(values) > limit else "") if values else "none recorded"


def instances_per_set(analysis: Analysis) -> str:
    """``40 per set`` or the range with the sets that differ, from the instances each configuration was scored on."""
    sizes = {key: {len(ids) for ids in data.ids.values()} for key, data in analysis.results.datasets.items()}
    if not sizes:
        return "not recorded (no bootstrap artifacts)"
    every = sorted({n for values in sizes.values() for n in values})
    if len(every) == 1:
        return f"{every[0]} per set"
    common = max(every, key=lambda n: sum(n in v for v in sizes.values()))
    other = [f"{key}: {'/'.join(map(str, sorted(v)))}" for key, v in sizes.items() if v != {common}]
    return f"{common} per set, except {'; '.join(other)}"


def header_lines(analysis: Analysis, profile: str | None) -> list[str]:
    """The report's first lines: what was run, and one provenance line linking to the full section."""
    runs = analysis.results.runs
    strategies = [s for s in runs.loc[runs["kind"] == "prompted", "strategy"]]
    provenance = analysis.provenance
    codes = _join(provenance["code_version"], 3)
    versions = _join(provenance["data_version"], 2)
    return [
        f"**Profile** {profile or 'not recorded'} · **models** {_join(runs['model'])} · "
        f"**strategies** {_join(strategies)} · **instances** {instances_per_set(analysis)}",
        "",
        f"Provenance: {len(provenance)} runs (keys in [Provenance](#provenance)), code version {codes}, "
        f"data version {versions}; run ids, commits and spend: [provenance.md](provenance.md).",
        "",
    ]


def finding_lines(items: list[Finding]) -> list[str]:
    if not items:
        return ["No finding: no paired test has anything to compare here (one configuration per set?).", ""]
    return [f"{n}. {f.text} ([table]({f.table}))" for n, f in enumerate(items, 1)] + [""]


def quality_lines(analysis: Analysis, flags: Mapping[tuple[str, str], list[str]], rates: list[float]) -> list[str]:
    """The legend of the heatmap's warning mark (the runs' warn_rate), and the flagged cells."""
    watched = ", ".join(label for _, label in WATCHED)
    rate = (
        f"warn_rate {rates[0]:.0%}"
        if len(rates) == 1
        else "each run's warn_rate (" + ", ".join(f"{r:.0%}" for r in rates) + ")"
    )
    logged = [m for m, _ in WATCHED if m in analysis.results.scores.columns]
    if not logged:
        return [f"Answer quality ({watched}) was not logged for these runs, so no cell can be flagged.", ""]
    if not flags:
        return [f"No cell has {watched} above {rate}.", ""]
    lines = [
        f"{FLAG} marks the {len(flags)} cell(s) where {watched} exceed {rate} "
        "(the run's end-of-run warning); their F1 counts answers not to trust:",
        "",
    ]
    table = pd.DataFrame(
        [{"configuration": c, "dataset": k, "above warn_rate": "; ".join(v)} for (c, k), v in flags.items()]
    )
    return lines + [markdown_table(table, index=False), ""]


def read_gaps(path: Path | None) -> pd.DataFrame:
    """The generalization-gap table written by :func:`src.report.tables.write_tables` (marks kept as text)."""
    if path is None:
        return pd.DataFrame()
    gaps = pd.read_csv(path)
    for column in ("mark", "reason"):  # an empty text reads back as NaN
        if column in gaps.columns:
            gaps[column] = [m if isinstance(m, str) else "" for m in gaps[column]]
    return gaps


def gap_lines(analysis: Analysis, tables: Mapping[str, Path]) -> list[str]:
    path = tables.get("generalization_gap")
    gaps = read_gaps(path)
    if gaps.empty:
        return ["No shifted set has its base set scored by the same configuration: no gap to show.", ""]
    name = CORRECTION_NAMES.get(analysis.correction, analysis.correction)
    return [
        f"F1 on the shifted set minus F1 on its base set, per configuration. {SIGNIFICANT}: significant after {name} "
        f"over all {len(gaps)} gap cells (alpha = {analysis.alpha}); {RAW_ONLY}: raw p < alpha only; "
        f"{EQUIVALENT_MARK}: shown equivalent (TOST within +-{analysis.settings.margin}, {name}); no mark: "
        "inconclusive, not equal. Calibrated test of the gap (two-sided document permutation test, docs/scoring.md): "
        "paired on the instances both sets hold, the instances only one side holds counted beside and left out; "
        "two-sample where the sets share none; no verdict below the minimum documents "
        f"([table](tables/{Path(path).name}), with each cell's verdict, interval, composition and minimum "
        "detectable difference)." + _composition(gaps),
        "",
        compact_table(gap_matrix(gaps)),
        "",
    ]


def _composition(gaps: pd.DataFrame) -> str:
    """One sentence on the paired cells whose sets differ in composition (what the gap leaves out)."""
    if "dropped" not in gaps.columns:
        return ""
    differ = gaps[gaps["paired"].astype(bool) & ((gaps["dropped"] > 0) | (gaps["added"] > 0))]
    if differ.empty:
        return ""
    return (
        f" In {len(differ)} paired cells the two sets differ in composition: up to {int(differ['dropped'].max())} "
        f"base instances absent from the shifted set and {int(differ['added'].max())} shifted instances without "
        "their base version."
    )


def note_table(notes: list[str]) -> str:
    """The input notes as one table: the dataset a note is about, and the note."""
    rows = []
    for note in notes:
        head, _, rest = note.partition(": ")
        if rest and "/" in head and " " not in head:
            rows.append({"dataset": head, "note": rest})
        else:
            rows.append({"dataset": "–", "note": note})
    return markdown_table(pd.DataFrame(rows), index=False)


def heatmap_section(page: Page) -> list[str]:
    """The F1 heatmap, what its rows and columns are, the instance pages, and the flagged cells."""
    lines = ["## F1 by configuration and dataset", ""]
    page.figure(lines, "heatmap", HEATMAP_CAPTION, "no configuration has an F1 on any dataset")
    pages = [page.out / "instances" / name for name in sorted(pages_with(page.out / "instances"))]
    links = ""
    if pages:
        named = ", ".join(f"[{p.stem.replace('_', '/', 1)}](instances/{p.name})" for p in pages)
        links = f" Instance pages (gold and predicted spans): {named}."
    lines += [
        "Rows: configurations by model, then strategy; columns: datasets by task, then dimension. "
        f"Intervals: [CSV](tables/heatmap_f1.csv){' and on hover' if page.drawn.get('heatmap') else ''}." + links,
        "",
    ]
    results = page.analysis.results
    rates = sorted(set(run_warn_rates(results.runs).values()))
    return lines + quality_lines(page.analysis, flags_of(results), rates)


def methods_section(page: Page) -> list[str]:
    analysis = page.analysis
    results, runs = analysis.results, analysis.results.runs
    name = CORRECTION_NAMES.get(analysis.correction, analysis.correction)
    lines = [
        "## Methods",
        "",
        f"Experiment `{results.experiment_name}`: "
        f"{len(runs)} configurations ({len(analysis.groups['all'])} prompted, "
        f"{int((runs['kind'] == 'finetuned').sum())} fine-tuned), {len(analysis.tests)} datasets with paired tests, "
        f"{analysis.resamples} bootstrap resamples per dataset (seed {analysis.seed}), alpha = {analysis.alpha}, "
        f"correction: {name} over all {analysis.prompted.pairs} pairwise tests of prompted configurations "
        f"(and {analysis.finetuned.pairs} of fine-tuned models, a family of their own).",
        "",
    ]
    lines += method_lines(analysis)
    if results.notes:
        lines += ["Input notes:", "", note_table(results.notes), ""]
    return lines


def results_section(page: Page) -> list[str]:
    """The per-dataset tables: prompted per task, fine-tuned, and the scorer variants."""
    tables = page.tables
    lines = [
        "## Results per dataset",
        "",
        "F1 (word-LCS micro-F1, as logged in MLflow) with the analysis's 95% bootstrap interval "
        "(see Methods for the resampling unit; the instance-level interval is in the per-dataset CSVs).",
        "",
    ]
    for task in TASK_ORDER:
        if f"results_{task}" in tables:
            lines += [f"### {task}", "", page.table_text(f"results_{task}"), ""]
    if "finetuned" in tables:
        lines += ["### Fine-tuned models (Table 10)", "", page.table_text("finetuned"), ""]
        lines += finetuned_lines(page.analysis, tables)
    if "scorers" in tables:
        lines += [
            "### The paper's formula beside the study's released scorer",
            "",
            f"Primary F1 (`{PRIMARY_SCORER}`: word LCS / max length, one Hungarian matching) and the released scorer's "
            'variants (`src/scoring/variants.py`; README, "Fidelity with the study"), on the same outputs:',
            "",
            page.table_text("scorers"),
            "",
        ]
    details = [k for k in tables if k.startswith("dataset_")]
    listed = ", ".join(f"[{k[len('dataset_') :]}](tables/{tables[k].name})" for k in details)
    lines += [f"Per-dataset details (precision, recall, strict/relaxed F1, parse failures, errors): {listed}.", ""]
    return lines


def instances_section(page: Page) -> list[str]:
    lines = [
        "## Instances per comparison",
        "",
        "Each pair of configurations is compared on the instances both were scored on; per family and dataset, "
        "the number of instances and of pairs compared on them (`tables/comparisons.csv`):",
        "",
    ]
    lines += instance_lines(page.analysis) + [""]
    if "comparisons" in page.tables and not instance_table(page.analysis).empty:
        lines += [page.table_text("comparisons"), ""]
    return lines


def _by_correction(frame: pd.DataFrame, index: list[str]) -> pd.DataFrame:
    """Outcome counts with one column per (count, correction), the correction by its report name."""
    pivot = frame.pivot_table(
        index=index,
        columns="correction",
        values=["pairs", *VERDICTS, "study_almost_equal"],
        sort=False,
    )
    pivot.columns = [f"{value} ({CORRECTION_NAMES.get(corr, corr)})" for value, corr in pivot.columns]
    return pivot


def rq1_section(page: Page) -> list[str]:
    analysis = page.analysis
    lines = ["## RQ1: does a significant difference on base carry over?", ""] + rq1_sentences(analysis) + [""]
    if not analysis.rq1.empty:
        lines += [compact_table(_by_correction(analysis.rq1, ["group", "reference", "target"])), ""]
    page.figure(lines, "rq1", "RQ1 outcome shares", "no pair of configurations is significantly better on a base set")
    return lines


def rq2_section(page: Page) -> list[str]:
    analysis = page.analysis
    lines = ["## RQ2: rank correlation between datasets", ""] + rq2_sentences(analysis) + [""]
    for group, corr in analysis.rq2.items():
        if corr.computed:
            lines += [f"Spearman rho, {group}:", "", markdown_table(corr.rho.rename_axis("dataset"), digits=2), ""]
    page.figure(lines, "rq2", "RQ2 Spearman heatmaps", "no group has a rank correlation (reasons above)")
    return lines


def strategy_lines(page: Page) -> list[str]:
    analysis = page.analysis
    lines = ["### Strategy pairs", ""]
    pairs = analysis.strategy_pairs
    if pairs.empty or pairs["pairs"].sum() == 0:
        return lines + ["Needs at least one model with two strategies scored on a generalization set; none here.", ""]
    lines += pair_sentences(
        pairs, lambda r: f"{r['strategy_a']} vs {r['strategy_b']}", "model-dataset cells", analysis.corrections
    ) + [""]
    summed = _by_correction(pairs[pairs["dimension"] == "all"], ["strategy_a", "strategy_b"])
    lines += [
        "Summed over dimensions (per dimension: `tables/rq3_strategy_pairs.csv`):",
        "",
        markdown_table(summed),
        "",
    ]
    page.figure(lines, "rq3_strategies", "RQ3 strategy pairs")
    return lines


def moe_lines(page: Page) -> list[str]:
    analysis = page.analysis
    lines = ["### Dense vs MoE within a family", ""]
    moe = analysis.dense_vs_moe
    if moe.empty:
        return lines + [f"This comparison {analysis.dense_vs_moe_reason}.", ""]
    lines += pair_sentences(moe, lambda r: f"MoE vs dense in family {r['family']}", "comparisons", analysis.corrections)
    counts = [c for c in moe.columns if c.startswith("n_")]
    lines += ["", markdown_table(moe.drop(columns=counts), index=False), ""]
    page.figure(lines, "rq3_moe", "RQ3 dense vs MoE")
    return lines


def rq3_section(page: Page) -> list[str]:
    """Strategies, dense vs MoE, model size, error types and the base vs clinical labels."""
    analysis = page.analysis
    lines = ["## RQ3: strategies, architecture, size and errors", ""] + strategy_lines(page) + moe_lines(page)
    lines += ["### Model size", ""]
    if not analysis.series:
        lines += [
            "This analysis needs more models: no size series (a `size_series` param, or one family with dense "
            f"models at two or more sizes) among the {analysis.results.runs['model'].nunique()} model(s) here.",
            "",
        ]
    else:
        lines += size_sentences(analysis) + [""]
        page.figure(lines, "size", "F1 against model size")
    lines += ["### Error types", ""]
    if analysis.errors.empty:
        lines += ["No error counts were logged.", ""]
    else:
        lines += error_sentences(analysis.errors) + ["", markdown_table(analysis.errors, index=False), ""]
        page.figure(lines, "errors", "Error types per dataset")
    lines += ["### Base vs clinical gold labels", ""]
    if page.drawn.get("top_labels"):
        lines += top_label_sentences(analysis.top_gold) + [""]
        page.figure(lines, "top_labels", "Most frequent gold strings, base vs t2c")
    else:
        lines += ["Skipped: no `top_gold` for base and t2c in the prepared-data statistics (`stats.json`).", ""]
    return lines


def configurations_section(page: Page) -> list[str]:
    listing = configurations_table(page.analysis).drop(columns=["key", "code_version", "data_version"], errors="ignore")
    return ["## Configurations", "", markdown_table(listing), ""]
