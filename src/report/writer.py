"""The written report (markdown + HTML) from a computed analysis, its tables and figures.

The sections' sentences come from :mod:`src.report.prose`, the tables from
:mod:`src.report.tables`; this module puts them in order and renders the page.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from src.redact import without_userinfo
from src.report.analysis import instance_table
from src.report.prose import (
    CORRECTION_NAMES,
    error_sentences,
    finetuned_lines,
    instance_lines,
    method_lines,
    pair_sentences,
    provenance_lines,
    rq1_sentences,
    rq2_sentences,
    size_sentences,
    top_label_sentences,
)
from src.report.tables import configurations_table, markdown_table
from src.study import PRIMARY_SCORER, TASK_ORDER

if TYPE_CHECKING:
    from src.report.analysis import Analysis


def _figure(lines: list[str], drawn: Mapping[str, list[Path]], name: str, caption: str, out: Path) -> None:
    for png in [p for p in drawn.get(name) or [] if p.suffix == ".png"]:
        lines.append(f"![{caption}]({png.relative_to(out).as_posix()})")
        lines.append("")


def build_report(analysis: Analysis, drawn: Mapping[str, list[Path]], tables: Mapping[str, Path], out: Path) -> str:
    """The report's markdown text."""
    results, c = analysis.results, analysis.correction
    cname = CORRECTION_NAMES.get(c, c)
    runs = results.runs
    lines = [
        "# Temporal extraction generalization study: results",
        "",
        f"Experiment `{results.experiment_name}` (id {results.experiment_id}) at `{without_userinfo(results.tracking_uri)}`: "
        f"{len(runs)} configurations ({len(analysis.groups['all'])} prompted, "
        f"{int((runs['kind'] == 'finetuned').sum())} fine-tuned), {len(analysis.tests)} datasets with paired tests, "
        f"{analysis.resamples} bootstrap resamples per dataset (seed {analysis.seed}), alpha = {analysis.alpha}, "
        f"correction: {cname} over all {analysis.prompted.pairs} pairwise tests of prompted configurations "
        f"(and {analysis.finetuned.pairs} of fine-tuned models, a family of their own).",
        "",
    ]
    lines += method_lines(analysis)
    if results.notes:
        lines += ["Input notes:", ""] + [f"- {note}" for note in results.notes] + [""]
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
        lines += finetuned_lines(analysis, tables)
    if "scorers" in tables:
        lines += [
            "### The paper's formula beside the study's released scorer",
            "",
            f"Primary F1 (`{PRIMARY_SCORER}`: word LCS / max length, one Hungarian matching) and the released scorer's "
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
    lines += instance_lines(analysis) + [""]
    if "comparisons" in tables and not instance_table(analysis).empty:
        lines += [Path(tables["comparisons"]).with_suffix(".md").read_text(encoding="utf-8"), ""]
    lines += ["## RQ1: does a significant difference on base carry over?", ""]
    lines += rq1_sentences(analysis) + [""]
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
    lines += ["## RQ2: rank correlation between datasets", ""] + rq2_sentences(analysis) + [""]
    for group, corr in analysis.rq2.items():
        if not corr.rho.isna().all().all():
            lines += [f"Spearman rho, {group}:", "", markdown_table(corr.rho.rename_axis("dataset"), digits=2), ""]
    _figure(lines, drawn, "rq2", "RQ2 Spearman heatmaps", out)
    lines += ["## RQ3: strategies, architecture, size and errors", "", "### Strategy pairs", ""]
    pairs = analysis.strategy_pairs
    if pairs.empty or pairs["pairs"].sum() == 0:
        lines += ["Needs at least one model with two strategies scored on a generalization set; none here.", ""]
    else:
        lines += pair_sentences(
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
        lines += pair_sentences(
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
        lines += size_sentences(analysis) + [""]
        _figure(lines, drawn, "size", "F1 against model size", out)
    lines += ["### Error types", ""]
    if analysis.errors.empty:
        lines += ["No error counts were logged.", ""]
    else:
        lines += error_sentences(analysis.errors) + ["", markdown_table(analysis.errors, index=False), ""]
        _figure(lines, drawn, "errors", "Error types per dataset", out)
    lines += ["### Base vs clinical gold labels", ""]
    if drawn.get("top_labels"):
        lines += top_label_sentences(analysis.top_gold) + [""]
        _figure(lines, drawn, "top_labels", "Most frequent gold strings, base vs t2c", out)
    else:
        lines += ["Skipped: no `top_gold` for base and t2c in the prepared-data statistics (`stats.json`).", ""]
    lines += provenance_lines(analysis)
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
