"""The study's analysis: ``python -m src.analyze`` turns the pipeline's runs into RQ1-RQ3 answers.

Reads exactly the MLflow runs the summary files under ``--summaries`` (default
``summaries/``) name, fetched by id (``src.report.provenance``), runs every pairwise paired
bootstrap test on the instances each pair shares, answers RQ1-RQ3 with the raw p < alpha
beside a multiple-comparison correction, compares the fine-tuned models, and writes tables
(CSV and markdown) to ``reports/tables/``, figures to ``reports/figures/``,
``reports/report.md`` with an HTML rendering, and ``reports/analysis.json`` (the headline
numbers and each configuration's provenance, for DVC). The computation is
``src.report.analysis``; this module parses arguments, loads, calls and writes.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

from src.report import figures, plots, rq, tables, writer
from src.report.analysis import Analysis, analysis_summary, run_analysis
from src.report.figures import read_top_gold
from src.report.loading import load_results
from src.tracking import PROJECT_ROOT, default_experiment, tracking_uri

log = logging.getLogger("src.analyze")

CONF_DIR = PROJECT_ROOT / "conf"
__all__ = ["Analysis", "analysis_summary", "main", "run_analysis", "write_outputs"]


def default_seed() -> int:
    from src.params import lookup

    return int(lookup("seed"))


def write_outputs(analysis: Analysis, out: Path) -> dict[str, Path]:
    """Tables, figures, the report (markdown + HTML) and ``analysis.json`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    written = tables.write_tables(analysis, out / "tables")
    drawn = figures.draw_all(analysis, out / "figures")
    analysis.timings["figures_s"] = time.perf_counter() - started
    report = writer.write_report(analysis, drawn, written, out)
    plots.write_plots(analysis, out / "plots")
    summary = out / "analysis.json"
    summary.write_text(json.dumps(analysis_summary(analysis), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return {"report": report, "html": report.with_suffix(".html"), "summary": summary}


def sweep_summaries(path: Path) -> list[str]:
    """The summary files (relative to the summaries folder) of a sweep's configurations."""

    sweep = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("sweep") or {}
    prompted = [f"runs/{m}-{s}.json" for m in sweep.get("models") or [] for s in sweep.get("strategies") or []]
    finetuned = [f"finetuned/{m}.json" for m in sweep.get("finetuned") or []]
    if not prompted and not finetuned:
        raise ValueError(f"{path}: the sweep names no configuration (sweep.models x sweep.strategies, sweep.finetuned)")
    return prompted + finetuned


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m src.analyze", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--experiment", default=None, help="MLflow experiment (default: conf/config.yaml mlflow.experiment)"
    )
    parser.add_argument("--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI, else the local store")
    parser.add_argument(
        "--summaries",
        type=Path,
        default=Path("summaries"),
        help="folder of the pipeline's summary files (**/*.json, each naming a run_id); "
        "exactly those runs are analysed (default: summaries)",
    )
    parser.add_argument(
        "--sweep",
        type=Path,
        default=None,
        help="a sweep file (sweep.yaml): analyse exactly its configurations' summaries, so a summary "
        "left by another profile never enters the report",
    )
    parser.add_argument("--out", type=Path, default=Path("reports"))
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=None, help="default: params.yaml seed")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--correction", choices=sorted(rq.CORRECTIONS), default="holm")
    parser.add_argument(
        "--stats-json",
        type=Path,
        default=None,
        help="prepared-data statistics for the top-label figure (default: <paths.prepared>/stats.json)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    if args.resamples < 1:
        print("error: --resamples must be at least 1", file=sys.stderr)
        return 2
    if not 0 < args.alpha < 0.5:
        print("error: --alpha must be in (0, 0.5)", file=sys.stderr)
        return 2
    from src.params import lookup

    stats_json = args.stats_json or PROJECT_ROOT / lookup("paths.prepared") / "stats.json"
    uri = tracking_uri(args.tracking_uri)
    started = time.perf_counter()
    try:
        expected = sweep_summaries(args.sweep) if args.sweep else None
        results = load_results(args.experiment or default_experiment(), uri, args.summaries, expected)
    except ValueError as error:
        message = " ".join(str(error).split())  # one line, whatever the store's message held
        print(f"error: {message}", file=sys.stderr)
        return 2
    loaded = time.perf_counter() - started
    analysis = run_analysis(
        results, args.resamples, default_seed() if args.seed is None else args.seed, args.alpha, args.correction
    )
    analysis.timings["load_s"] = loaded
    analysis.top_gold = read_top_gold(stats_json)
    written = write_outputs(analysis, args.out)
    log.info(
        "report: %s (load %.1fs, analysis %.1fs, figures %.1fs)",
        written["report"],
        loaded,
        analysis.timings["analysis_s"],
        analysis.timings["figures_s"],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
