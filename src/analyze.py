"""The study's analysis: ``python -m src.analyze`` turns the pipeline's runs into RQ1-RQ3 answers.

Reads exactly the MLflow runs the summary files under ``--summaries`` (default
``summaries/``) name, by key (``src.report.provenance``), runs every pairwise paired
bootstrap test on the instances each pair shares, answers RQ1-RQ3 with the raw p < alpha
beside a multiple-comparison correction, compares the fine-tuned models, and writes tables
(CSV and markdown) to ``reports/tables/``, figures to ``reports/figures/``,
``reports/report.md`` with an HTML rendering, and ``reports/analysis.json`` (the headline
numbers and each configuration's provenance, for DVC). The computation is
``src.report.analysis``; this module parses arguments, loads, calls and writes.

``--evidence DIR`` reads each configuration from its evidence folder (a DVC output) where it
exists, so a pulled study needs no MLflow store; ``--record DIR`` writes the analysis run's own
evidence folder there (restorable like the others). ``reports/provenance.md`` holds the runs'
history on this machine (run ids, commits, spend), which no DVC output does. ``--runs ID1,ID2`` or ``--experiment NAME``
alone (no ``--summaries``/``--sweep``) builds a report from hand runs, labelled as such.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, get_args, get_origin

from pydantic import ValidationError

from src import study
from src.cli import setup_logging
from src.core.locate import project_relative
from src.core.settings import Analysis as AnalysisSettings, load_params, load_sweep
from src.data.schema import read_records
from src.launch import launch
from src.report import comparisons, figures, plots, tables, writer
from src.report.analysis import Analysis, run_analysis
from src.report.browser import write_instance_pages
from src.report.figures import read_top_gold
from src.report.loading import load_hand_runs, load_results
from src.report.prose import history_page
from src.report.robustness import robustness_metrics
from src.report.summary import analysis_summary
from src.scoring.clustered import RESAMPLE_UNITS
from src.tracking.evidence import write_evidence
from src.tracking.keys import KEY_TAG, code_version, run_key, without_history
from src.tracking.run_tree import ANALYSIS_ARTIFACTS, PROFILE_TAG, log_analysis_run
from src.tracking.store import PROJECT_ROOT, default_experiment, tracking_uri

log = logging.getLogger("src.analyze")

__all__ = ["Analysis", "analysis_summary", "main", "run_analysis", "write_outputs"]


def default_seed() -> int:
    return load_params().seed


def instance_texts(keys: set[tuple[str, str]]) -> dict[tuple[str, str], dict[str, str]]:
    """Each (task, dataset)'s instance texts by id, from the prepared and derived sets (params.yaml
    paths); a set that is not on this machine (hand runs from elsewhere) gets none: its instance
    page then shows ids and spans without the text."""

    texts: dict[tuple[str, str], dict[str, str]] = {}
    paths = load_params().paths
    for task, dataset in sorted(keys):
        path = PROJECT_ROOT / study.dataset_path(paths.prepared, paths.derived, task, dataset)
        if path.is_file():
            texts[(task, dataset)] = {record.id: record.text for record in read_records(path)}
        else:
            log.warning("%s/%s: %s is missing; its instance page has no texts", task, dataset, path)
    return texts


def write_outputs(analysis: Analysis, out: Path, profile: str | None = None) -> dict[str, Path]:
    """Tables, figures, instance pages, the report (markdown + HTML) and ``analysis.json`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    written = tables.write_tables(analysis, out / "tables")
    drawn = figures.draw_all(analysis, out / "figures")
    analysis.timings["figures_s"] = time.perf_counter() - started
    instances = getattr(analysis.results, "instances", None) or {}
    if instances:
        texts = instance_texts({(task, dataset) for _, task, dataset in instances})
        write_instance_pages(out / "instances", texts, instances)
    report = writer.write_report(analysis, drawn, written, out, profile=profile)
    plots.write_plots(analysis, out / "plots")
    summary = out / "analysis.json"
    summary.write_text(json.dumps(analysis_summary(analysis), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    history = out / "provenance.md"
    history.write_text(history_page(analysis), encoding="utf-8")
    return {"report": report, "html": report.with_suffix(".html"), "summary": summary, "provenance": history}


def sweep_summaries(path: Path) -> list[str]:
    """The summary files (relative to the summaries folder) of a sweep's configurations."""
    summaries = load_sweep(path).summaries()
    if not summaries:
        raise ValueError(f"{path}: the sweep names no configuration (sweep.models x sweep.strategies, sweep.finetuned)")
    return summaries


def analysis_record(analysis: Analysis, profile: str, args: argparse.Namespace) -> dict:
    """The analysis run's name, params, tags and key: its settings and the keys of the runs it read
    (so the same analysis of the same runs has the same key anywhere)."""
    params = {
        "resamples": args.resamples,
        "alpha": args.alpha,
        "correction": args.correction,
        "margin": args.margin,
        "resample_unit": args.unit,
        "power": args.power,
        "flip_threshold": args.flip_threshold,
        "out": str(args.out),
        "code_version": code_version(),
    }
    name = f"analysis {profile}"
    keys = ",".join(sorted(str(k) for k in analysis.results.runs["key"]))
    key = run_key("analysis", name, {**params, "runs": keys})
    return {
        "run_name": name,
        "params": params,
        "tags": {"kind": "analysis", PROFILE_TAG: profile, KEY_TAG: key},
        "metrics": robustness_metrics(analysis.robustness),
    }


def log_analysis(experiment: str, uri: str, record: dict, out: Path) -> None:
    """The analysis as an MLflow run under the profile's parent (src/tracking/run_tree.py). The report is
    already written: a store that refuses the run costs the UI view, not the report (one warning)."""
    try:
        run_id = log_analysis_run(experiment, uri, record, out)
    except Exception as error:  # noqa: BLE001 - any store fault: the files on disk are the result
        log.warning("the analysis was not logged to MLflow (%s): %s", uri, " ".join(str(error).split())[:300])
        return
    try:
        log_metrics(uri, run_id, record.get("metrics") or {})
    except Exception as error:  # noqa: BLE001 - as above: the metrics are in analysis.json too
        log.warning(
            "the analysis's metrics were not logged to MLflow (%s): %s", uri, " ".join(str(error).split())[:300]
        )
    log.info("analysis logged to MLflow as run %s (%s)", run_id, record["run_name"])


def log_metrics(uri: str, run_id: str, metrics: dict[str, float]) -> None:
    """Log ``metrics`` (name -> value) to the analysis run, in batches of MLflow's limit."""
    import mlflow
    from mlflow.entities import Metric

    if not metrics:
        return
    client = mlflow.MlflowClient(tracking_uri=uri)
    items = [Metric(name, float(value), 0, 0) for name, value in sorted(metrics.items())]
    for start in range(0, len(items), 1000):
        client.log_batch(run_id, metrics=items[start : start + 1000])


def write_analysis_evidence(folder: Path, record: dict, experiment: str, out: Path) -> None:
    """The analysis run's evidence folder: its record, and the report files a restore logs as its artifacts."""
    source = project_relative(out)
    artifacts = [[f"{source}/{name}", folder_name] for name, folder_name in ANALYSIS_ARTIFACTS] if source else []
    run = {
        "key": record["tags"][KEY_TAG],
        "run_name": record["run_name"],
        "experiment": experiment,
        "kind": "analysis",
        "complete": True,
        "params": without_history(record["params"]),
        "metrics": record.get("metrics") or {},
        "tags": record["tags"],
        "artifacts": artifacts,
    }
    write_evidence(folder, run, {}, {})


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m src.analyze", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--experiment", default=None, help="MLflow experiment (default: conf/config.yaml mlflow.experiment)"
    )
    parser.add_argument("--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI, else the local store")
    parser.add_argument(
        "--runs",
        default=None,
        help="comma-separated MLflow run ids: a report from these hand runs (not the pipeline's summaries)",
    )
    parser.add_argument(
        "--evidence",
        type=Path,
        default=None,
        help="folder of the configurations' evidence (DVC outputs, e.g. evidence): read there where present",
    )
    parser.add_argument(
        "--summaries",
        type=Path,
        default=None,
        help="folder of the pipeline's summary files (**/*.json, each naming a run_id); "
        "exactly those runs are analysed (default: summaries, unless --runs or --experiment alone)",
    )
    parser.add_argument(
        "--sweep",
        type=Path,
        default=None,
        help="a sweep file (sweep.yaml): analyse exactly its configurations' summaries, so a summary "
        "left by another profile never enters the report",
    )
    parser.add_argument("--out", type=Path, default=Path("reports"))
    parser.add_argument(
        "--record",
        type=Path,
        default=None,
        help="with --sweep: write the analysis run's evidence folder here (a DVC output; restorable)",
    )
    parser.add_argument(
        "--resamples",
        type=int,
        default=None,
        help="default: the --sweep profile's resamples, else params.yaml analysis.resamples",
    )
    parser.add_argument("--seed", type=int, default=None, help="default: params.yaml seed")
    parser.add_argument("--alpha", type=float, default=None, help="default: params.yaml analysis.alpha")
    parser.add_argument(
        "--correction",
        choices=sorted(comparisons.CORRECTIONS),
        default=None,
        help="default: params.yaml analysis.correction",
    )
    parser.add_argument(
        "--margin", type=float, default=None, help="equivalence margin (F1); default: params.yaml analysis.margin"
    )
    parser.add_argument(
        "--unit",
        choices=RESAMPLE_UNITS,
        default=None,
        help="what a bootstrap resample draws: whole documents or single instances (the study's); "
        "default: params.yaml analysis.resample_unit",
    )
    parser.add_argument("--power", type=float, default=None, help="default: params.yaml analysis.power")
    parser.add_argument(
        "--flip-threshold", type=float, default=None, help="default: params.yaml analysis.flip_threshold"
    )
    parser.add_argument(
        "--stats-json",
        type=Path,
        default=None,
        help="prepared-data statistics for the top-label figure (default: <paths.prepared>/stats.json)",
    )
    args = parser.parse_args(argv)
    defaults = load_params().analysis
    if args.sweep is not None and args.resamples is None:  # a profile sets its resamples
        args.resamples = load_sweep(args.sweep).resamples
    for name, key in SETTINGS.items():
        if getattr(args, name) is None:
            setattr(args, name, getattr(defaults, key))
    return args


#: Flag (argparse name) -> its default's key in params.yaml's ``analysis`` block.
SETTINGS = {
    "resamples": "resamples",
    "alpha": "alpha",
    "correction": "correction",
    "margin": "margin",
    "unit": "resample_unit",
    "power": "power",
    "flip_threshold": "flip_threshold",
}


def _allowed(key: str) -> str:
    """The values :class:`~src.core.settings.Analysis` allows for ``key``, as a reader writes them."""
    field = AnalysisSettings.model_fields[key]
    if field.annotation is not None and get_origin(field.annotation) is Literal:
        return "one of " + ", ".join(get_args(field.annotation))
    bounds = {
        name: getattr(rule, name) for rule in field.metadata for name in ("gt", "ge", "lt", "le") if hasattr(rule, name)
    }
    low = f"({bounds['gt']}" if "gt" in bounds else f"[{bounds['ge']}"
    high = f"{bounds['lt']})" if "lt" in bounds else f"{bounds['le']}]"
    return f"in {low}, {high}"


def check_settings(args: argparse.Namespace) -> str | None:
    """The first analysis setting out of range, as an error line (None when all are fine): the
    bounds are the settings model's, so a flag is checked as the same value in params.yaml is."""
    given = {key: getattr(args, name) for name, key in SETTINGS.items()}
    try:
        AnalysisSettings.model_validate(given)
    except ValidationError as error:
        key = str(error.errors()[0]["loc"][0])
        flag = next(name for name, setting in SETTINGS.items() if setting == key)
        return f"--{flag.replace('_', '-')} must be {_allowed(key)}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    setup_logging()
    args = parse_args(argv)
    problem = check_settings(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    stats_json = args.stats_json or PROJECT_ROOT / load_params().paths.prepared / "stats.json"
    uri = tracking_uri(args.tracking_uri)
    started = time.perf_counter()
    hand = args.runs is not None or (
        args.experiment is not None and args.summaries is None and args.sweep is None and args.evidence is None
    )
    try:
        if hand:
            run_ids = [part.strip() for part in (args.runs or "").split(",") if part.strip()]
            if args.runs is not None and not run_ids:
                raise ValueError("--runs names no run id")
            if args.summaries is not None or args.sweep is not None:
                raise ValueError("--runs reads hand runs: it takes no --summaries or --sweep")
            results = load_hand_runs(uri, args.experiment or (None if run_ids else default_experiment()), run_ids)
        else:
            expected = sweep_summaries(args.sweep) if args.sweep else None
            summaries = args.summaries or Path("summaries")
            results = load_results(args.experiment or default_experiment(), uri, summaries, expected, args.evidence)
    except ValueError as error:
        message = " ".join(str(error).split())  # one line, whatever the store's message held
        print(f"error: {message}", file=sys.stderr)
        return 2
    loaded = time.perf_counter() - started
    analysis = run_analysis(
        results,
        resamples=args.resamples,
        seed=default_seed() if args.seed is None else args.seed,
        alpha=args.alpha,
        correction=args.correction,
        margin=args.margin,
        unit=args.unit,
        power=args.power,
        flip_threshold=args.flip_threshold,
    )
    analysis.timings["load_s"] = loaded
    analysis.top_gold = read_top_gold(stats_json)
    profile = None
    if args.sweep:
        profile = load_sweep(args.sweep).profile
    written = write_outputs(analysis, args.out, profile)
    if profile and not hand:
        experiment = args.experiment or default_experiment()
        record = analysis_record(analysis, profile, args)
        if args.record is not None:
            write_analysis_evidence(args.record, record, experiment, args.out)
        log_analysis(experiment, uri, record, args.out)
    log.info(
        "report: %s (load %.1fs, analysis %.1fs, figures %.1fs)",
        written["report"],
        loaded,
        analysis.timings["analysis_s"],
        analysis.timings["figures_s"],
    )
    return 0


if __name__ == "__main__":
    launch(main)
