"""The written report (markdown + HTML) from a computed analysis, its tables and figures.

The sections' sentences come from :mod:`src.report.prose`, the tables from
:mod:`src.report.tables`; this module puts them in order and renders the page.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import pandas as pd

from src.redact import redact_uris
from src.report.analysis import instance_table
from src.report.browser import page_name, pages_with
from src.report.findings import Finding, findings
from src.report.heatmap import FLAG, RAW_ONLY, SIGNIFICANT, f1_grid, flags_of, gap_matrix, heatmap_html, run_warn_rates
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
from src.report.tables import compact_table, configurations_table, markdown_table
from src.runs.verdict import WATCHED
from src.study import PRIMARY_SCORER, TASK_ORDER

if TYPE_CHECKING:
    from src.report.analysis import Analysis

HEATMAP_CAPTION = "F1 by configuration and dataset"


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
    commits = _join(provenance["git_commit"], 3)
    versions = _join(provenance["data_version"], 2)
    return [
        f"**Profile** {profile or 'not recorded'} · **models** {_join(runs['model'])} · "
        f"**strategies** {_join(strategies)} · **instances** {instances_per_set(analysis)}",
        "",
        f"Provenance: {len(provenance)} runs (ids in [Provenance](#provenance)), commit {commits}, "
        f"data version {versions}.",
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
    gaps["mark"] = [m if isinstance(m, str) else "" for m in gaps["mark"]]  # an empty mark reads back as NaN
    return gaps


def gap_lines(analysis: Analysis, tables: Mapping[str, Path]) -> list[str]:
    path = tables.get("generalization_gap")
    gaps = read_gaps(path)
    if gaps.empty:
        return ["No shifted set has its base set scored by the same configuration: no gap to show.", ""]
    name = CORRECTION_NAMES.get(analysis.correction, analysis.correction)
    return [
        f"F1 on the shifted set minus F1 on its base set, per configuration. {SIGNIFICANT}: significant after {name} "
        f"over all {len(gaps)} gap cells (alpha = {analysis.alpha}); {RAW_ONLY}: raw p < alpha only. Bootstrap of "
        "the gap, paired where both sets hold the same instances, two-sample otherwise "
        f"([table](tables/{Path(path).name})).",
        "",
        compact_table(gap_matrix(gaps)),
        "",
    ]


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


def build_report(
    analysis: Analysis,
    drawn: Mapping[str, list[Path]],
    tables: Mapping[str, Path],
    out: Path,
    profile: str | None = None,
) -> str:
    """The report's markdown text: headline (what ran, findings, heatmap, gaps), then methods and full tables."""
    results, c = analysis.results, analysis.correction
    cname = CORRECTION_NAMES.get(c, c)
    runs = results.runs
    rates = sorted(set(run_warn_rates(runs).values()))
    flags = flags_of(results)
    gaps = read_gaps(tables.get("generalization_gap"))
    lines = ["# Temporal extraction generalization study: results", ""]
    lines += header_lines(analysis, profile)
    lines += ["## Findings", ""] + finding_lines(findings(analysis, gaps))
    lines += ["## F1 by configuration and dataset", ""]
    _figure(lines, drawn, "heatmap", HEATMAP_CAPTION, out, "no configuration has an F1 on any dataset")
    pages = [out / "instances" / name for name in sorted(pages_with(out / "instances"))]
    lines += [
        "Rows: configurations by model, then strategy; columns: datasets by task, then dimension. "
        f"Intervals: [CSV](tables/heatmap_f1.csv){' and on hover' if drawn.get('heatmap') else ''}."
        + (
            " Instance pages (gold and predicted spans): "
            + ", ".join(f"[{p.stem.replace('_', '/', 1)}](instances/{p.name})" for p in pages)
            + "."
            if pages
            else ""
        ),
        "",
    ]
    lines += quality_lines(analysis, flags, rates)
    lines += ["## Generalization gap per dimension", ""] + gap_lines(analysis, tables)
    lines += [
        "## Methods",
        "",
        f"Experiment `{results.experiment_name}` (id {results.experiment_id}) at `{redact_uris(results.tracking_uri)}`: "
        f"{len(runs)} configurations ({len(analysis.groups['all'])} prompted, "
        f"{int((runs['kind'] == 'finetuned').sum())} fine-tuned), {len(analysis.tests)} datasets with paired tests, "
        f"{analysis.resamples} bootstrap resamples per dataset (seed {analysis.seed}), alpha = {analysis.alpha}, "
        f"correction: {cname} over all {analysis.prompted.pairs} pairwise tests of prompted configurations "
        f"(and {analysis.finetuned.pairs} of fine-tuned models, a family of their own).",
        "",
    ]
    lines += method_lines(analysis)
    if results.notes:
        lines += ["Input notes:", "", note_table(results.notes), ""]
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
        lines += [compact_table(rq1), ""]
    _figure(
        lines,
        drawn,
        "rq1",
        "RQ1 outcome shares",
        out,
        "no pair of configurations is significantly better on a base set",
    )
    lines += ["## RQ2: rank correlation between datasets", ""] + rq2_sentences(analysis) + [""]
    for group, corr in analysis.rq2.items():
        if corr.computed:
            lines += [f"Spearman rho, {group}:", "", markdown_table(corr.rho.rename_axis("dataset"), digits=2), ""]
    _figure(lines, drawn, "rq2", "RQ2 Spearman heatmaps", out, "no group has a rank correlation (reasons above)")
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
<style>body{{font-family:sans-serif;max-width:72rem;margin:1rem auto;padding:0 1rem;line-height:1.4}}
h1{{font-size:1.5rem;margin:.3rem 0}}h2{{font-size:1.2rem;margin:1rem 0 .3rem}}
table{{border-collapse:collapse;font-size:0.8rem;margin:0.5rem 0}}td,th{{border:1px solid #ccc;padding:2px 6px}}
table.heatmap td{{text-align:center;min-width:2.6rem}}table.heatmap td a{{color:inherit;text-decoration:none}}
table.heatmap th{{font-weight:normal;font-size:.75rem;white-space:nowrap}}table.heatmap td.na{{color:#999}}
img{{max-width:100%}}</style></head><body>
{body}
</body></html>
"""


def _slug(text: str) -> str:
    """A heading's anchor as GitHub makes it (lowercase, spaces to hyphens, punctuation dropped)."""
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))


def instance_link(out: Path) -> Callable[[str, str], str | None]:
    """``link(config, task/dataset)``: the instance page filtered to ``config``, where the page exists."""

    pages = pages_with(out / "instances")

    def link(config: str, key: str) -> str | None:
        name = page_name(*key.split("/", 1))
        return f"instances/{name}#config={quote(config)}" if config in pages.get(name, ()) else None

    return link


def render_html(text: str, analysis: Analysis, out: Path) -> str:
    """report.md as HTML: headings with anchors, the heatmap PNG replaced by the coloured, linked table."""
    import markdown

    body = markdown.markdown(text, extensions=["tables"])
    body = re.sub(r"<h([1-3])>(.*?)</h\1>", lambda m: f'<h{m[1]} id="{_slug(m[2])}">{m[2]}</h{m[1]}>', body)
    picture = re.compile(r'<p><img alt="[^"]*" src="figures/heatmap_f1\.png" ?/?></p>')
    if picture.search(body):
        grid = f1_grid(analysis)
        table = heatmap_html(grid, flags_of(analysis.results), instance_link(out))
        body = picture.sub(lambda _: table, body, count=1)
    return HTML_PAGE.format(body=body)


def write_report(
    analysis: Analysis,
    drawn: Mapping[str, list[Path]],
    tables: Mapping[str, Path],
    out: Path,
    profile: str | None = None,
) -> Path:
    """Write ``report.md`` and ``report.html`` under ``out``; returns the markdown path.

    Instance pages already under ``out/instances`` (:mod:`src.report.browser`) are linked from the heatmap.
    """
    text = build_report(analysis, drawn, tables, out, profile)
    path = out / "report.md"
    path.write_text(text, encoding="utf-8")
    path.with_suffix(".html").write_text(render_html(text, analysis, out), encoding="utf-8")
    return path
