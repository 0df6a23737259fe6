"""The written report (markdown + HTML) from a computed analysis, its tables and figures.

The sections come from :mod:`src.report.sections`; this module puts them in order and renders the page.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import markdown

from src.report.browser import page_name, pages_with
from src.report.findings import findings
from src.report.heatmap import f1_grid, flags_of, heatmap_html
from src.report.prose import provenance_lines
from src.report.robustness_section import power_section, robustness_section
from src.report.sections import (
    Page,
    configurations_section,
    finding_lines,
    gap_lines,
    header_lines,
    heatmap_section,
    instances_section,
    methods_section,
    read_gaps,
    results_section,
    rq1_section,
    rq2_section,
    rq3_section,
)

if TYPE_CHECKING:
    from src.report.analysis import Analysis


def build_report(page: Page, profile: str | None = None) -> str:
    """The report's markdown text: headline (what ran, findings, heatmap, gaps), then methods and full tables."""
    analysis, tables = page.analysis, page.tables
    gaps = read_gaps(tables.get("generalization_gap"))
    lines = ["# Temporal extraction generalization study: results", ""]
    lines += header_lines(analysis, profile)
    lines += ["## Findings", ""] + finding_lines(findings(analysis, gaps))
    lines += heatmap_section(page)
    lines += ["## Generalization gap per dimension", ""] + gap_lines(analysis, tables)
    sections = (
        methods_section,
        power_section,
        results_section,
        instances_section,
        rq1_section,
        rq2_section,
        rq3_section,
        robustness_section,
    )
    for section in sections:
        lines += section(page)
    lines += provenance_lines(analysis)
    lines += configurations_section(page)
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
    text = build_report(Page(analysis, drawn, tables, out), profile)
    path = out / "report.md"
    path.write_text(text, encoding="utf-8")
    path.with_suffix(".html").write_text(render_html(text, analysis, out), encoding="utf-8")
    return path
