"""The study's analysis: ``python -m src.analyze`` turns an experiment's runs into RQ1-RQ3 answers.

Reads the latest FINISHED run per configuration from MLflow, runs every pairwise paired
bootstrap test at once per dataset (one shared resample matrix), answers RQ1-RQ3 with the
raw p < alpha beside a multiple-comparison correction, and writes tables (CSV and
markdown) to ``reports/tables/``, figures to ``reports/figures/``, ``reports/report.md``
with an HTML rendering, and ``reports/analysis.json`` (the headline numbers, for DVC).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import yaml

from src.report import figures, rq, writer
from src.report.figures import read_top_gold
from src.report.loading import Study, load_study
from src.tracking import PROJECT_ROOT, tracking_uri

log = logging.getLogger("src.analyze")

CONF_DIR = PROJECT_ROOT / "conf"
AGGREGATE_DIMENSIONS = ("all", "base")


@dataclass
class Analysis:
    """Every computed result the figures and the report draw from."""

    study: Study
    resamples: int
    seed: int
    alpha: float
    correction: str
    dimensions: dict[str, list[str]]
    groups: dict[str, list[str]]
    f1: pd.DataFrame
    tests: dict[str, rq.PairwiseTests]
    p_adjusted: dict[str, np.ndarray]
    outcomes: dict[str, dict[str, pd.DataFrame]]
    rq1: pd.DataFrame
    rq2: dict[str, rq.Correlation]
    strategy_pairs: pd.DataFrame
    dense_vs_moe: pd.DataFrame
    dense_vs_moe_reason: str | None
    series: dict[str, list[str]]
    size_curves: pd.DataFrame
    size_trend: pd.DataFrame
    errors: pd.DataFrame
    top_gold: dict[str, dict] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def corrections(self) -> tuple[str, str]:
        return ("none", self.correction)


def default_experiment() -> str:
    """The experiment the runs log to, as ``conf/config.yaml`` names it."""
    config = yaml.safe_load((CONF_DIR / "config.yaml").read_text(encoding="utf-8"))
    return str(config["mlflow"]["experiment"])


def default_seed() -> int:
    from src.params import lookup

    return int(lookup("seed"))


def load_dimensions(directory: Path = CONF_DIR / "dimension") -> dict[str, list[str]]:
    """Generalization dimension -> ``task/dataset`` keys, from the Hydra ``dimension`` group.

    A dimension file lists its own sets plus ``base`` "for pairing"; a set belongs to a
    dimension when that is the only dimension file (``all`` and ``base`` aside) listing it.
    """
    listed: dict[str, list[str]] = {}
    for path in sorted(directory.glob("*.yaml")):
        if path.stem in AGGREGATE_DIMENSIONS:
            continue
        spec = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        for task, names in (spec.get("datasets") or {}).items():
            for name in names or []:
                listed.setdefault(f"{task}/{name}", []).append(str(spec.get("name", path.stem)))
    out: dict[str, list[str]] = {}
    for key in rq.ordered_keys(listed):
        if len(listed[key]) == 1:
            out.setdefault(listed[key][0], []).append(key)
    if not out:
        raise ValueError(f"{directory}: no dimension file assigns a dataset to a dimension")
    return out


def strategy_groups(runs: pd.DataFrame) -> dict[str, list[str]]:
    """Prompted configurations: all, inductive+ (strategies with exemplars) and non-inductive."""
    prompted = runs[runs["kind"] == "prompted"]
    return {
        "all": list(prompted.index),
        "inductive+": list(prompted.index[prompted["inductive_plus"].astype(bool)]),
        "non-inductive": list(prompted.index[~prompted["inductive_plus"].astype(bool)]),
    }


def run_analysis(
    study: Study,
    resamples: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
    correction: str = "holm",
    dimensions: dict[str, list[str]] | None = None,
) -> Analysis:
    """Compute RQ1-RQ3 from a loaded study (no file is written)."""
    if correction not in rq.CORRECTIONS:
        raise ValueError(f"unknown correction {correction!r}; choose one of {sorted(rq.CORRECTIONS)}")
    timings = {}
    started = time.perf_counter()
    dimensions = dimensions if dimensions is not None else load_dimensions()
    groups = strategy_groups(study.runs)
    prompted = set(groups["all"])
    stacked = {}
    for key, data in study.datasets.items():
        keep = [n for n, c in enumerate(data.configs) if c in prompted]
        if len(keep) >= 2:
            stacked[key] = replace(data, configs=[data.configs[n] for n in keep], stats=data.stats[keep])
    tests = rq.pairwise_tests(stacked, resamples, seed)
    timings["pairwise_tests_s"] = time.perf_counter() - started
    outcomes = rq.outcome_tables(tests, alpha, correction)
    f1 = rq.score_table(study.scores, groups["all"])
    links = rq.reference_links(list(outcomes["none"]))
    rq1 = pd.concat(
        [rq.rq1_transfer(outcomes[c], links, groups).assign(correction=c) for c in ("none", correction)],
        ignore_index=True,
    )
    strategy_pairs = pd.concat(
        [rq.rq3_strategy_pairs(outcomes[c], study.runs, dimensions).assign(correction=c) for c in ("none", correction)],
        ignore_index=True,
    )
    moe_tables, reason = [], None
    for c in ("none", correction):
        table, reason = rq.rq3_dense_vs_moe(outcomes[c], study.runs, dimensions)
        moe_tables.append(table.assign(correction=c) if not table.empty else table)
    series = rq.size_series(study.runs)
    curves, trend = rq.size_curves(f1, study.runs, series)
    correlations = rq.rq2_correlations(f1, groups, correction)
    errors = rq.error_breakdown(study.scores[study.scores["config"].isin(prompted)])
    timings["analysis_s"] = time.perf_counter() - started
    return Analysis(
        study=study, resamples=resamples, seed=seed, alpha=alpha, correction=correction,
        dimensions=dimensions, groups=groups, f1=f1, tests=tests,
        p_adjusted=rq.directional_adjusted(tests, correction), outcomes=outcomes, rq1=rq1,
        rq2=correlations, strategy_pairs=strategy_pairs,
        dense_vs_moe=pd.concat(moe_tables, ignore_index=True), dense_vs_moe_reason=reason,
        series=series, size_curves=curves, size_trend=trend, errors=errors, timings=timings,
    )


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item"):
        return _clean(value.item())
    return value


def _outcome_block(row: dict) -> dict:
    return {"pairs": int(row["pairs"]), **{o: row[o] for o in ("better", "equal", "worse")}}


def analysis_summary(analysis: Analysis) -> dict:
    """The headline numbers as JSON (DVC metrics); NaN becomes null."""
    study = analysis.study
    significant = {}
    for key, test in analysis.tests.items():
        entry = {"pairs": len(test.configs) * (len(test.configs) - 1) // 2, "instances": test.instances}
        for c in analysis.corrections:
            table = analysis.outcomes[c][key].to_numpy()
            entry[f"significant_{c}"] = int((table == "better").sum())
        significant[key] = entry
    rq1 = {}
    for row in analysis.rq1.itertuples(index=False):
        block = rq1.setdefault(row.correction, {}).setdefault(row.group, {})
        block[row.target if row.target == "all" else f"{row.reference}->{row.target}"] = _outcome_block(row._asdict())
    rq2 = {}
    for group, corr in analysis.rq2.items():
        rq2[group] = {"configs": len(corr.configs), "mean_rho": rq.mean_off_diagonal(corr.rho), "reason": corr.reason}
    pairs = analysis.strategy_pairs
    strategy = {}
    for row in pairs[pairs["dimension"] == "all"].itertuples(index=False):
        strategy.setdefault(row.correction, {})[f"{row.strategy_a} vs {row.strategy_b}"] = _outcome_block(row._asdict())
    moe = {}
    if not analysis.dense_vs_moe.empty:
        for row in analysis.dense_vs_moe[analysis.dense_vs_moe["dimension"] == "all"].itertuples(index=False):
            moe.setdefault(row.correction, {})[row.family] = _outcome_block(row._asdict())
    errors = {
        row.dataset: {n: getattr(row, f"share_{n}") for n in ("missing", "spurious", "boundary")}
        for row in analysis.errors.itertuples(index=False)
    }
    return _clean({
        "experiment": study.experiment_name,
        "configurations": len(study.runs),
        "prompted": len(analysis.groups["all"]),
        "datasets": list(analysis.tests),
        "resamples": analysis.resamples,
        "seed": analysis.seed,
        "alpha": analysis.alpha,
        "correction": analysis.correction,
        "significant_pairs": significant,
        "rq1": rq1,
        "rq2": rq2,
        "rq3": {"strategy_pairs": strategy, "dense_vs_moe": moe or analysis.dense_vs_moe_reason,
                "size_series": analysis.series},
        "errors": errors,
    })


def write_outputs(analysis: Analysis, out: Path) -> dict[str, Path]:
    """Tables, figures, the report (markdown + HTML) and ``analysis.json`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tables = writer.write_tables(analysis, out / "tables")
    drawn = figures.draw_all(analysis, out / "figures")
    analysis.timings["figures_s"] = time.perf_counter() - started
    report = writer.write_report(analysis, drawn, tables, out)
    summary = out / "analysis.json"
    summary.write_text(json.dumps(analysis_summary(analysis), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return {"report": report, "html": report.with_suffix(".html"), "summary": summary}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m src.analyze", description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default=None, help="MLflow experiment (default: conf/config.yaml mlflow.experiment)")
    parser.add_argument("--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI, else the local store")
    parser.add_argument("--out", type=Path, default=Path("reports"))
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=None, help="default: params.yaml seed")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--correction", choices=sorted(rq.CORRECTIONS), default="holm")
    parser.add_argument("--stats-json", type=Path, default=None,
                        help="prepared-data statistics for the top-label figure (default: <paths.prepared>/stats.json)")
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
        study = load_study(args.experiment or default_experiment(), uri)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    loaded = time.perf_counter() - started
    analysis = run_analysis(study, args.resamples, default_seed() if args.seed is None else args.seed,
                            args.alpha, args.correction)
    analysis.timings["load_s"] = loaded
    analysis.top_gold = read_top_gold(stats_json)
    written = write_outputs(analysis, args.out)
    log.info("report: %s (load %.1fs, analysis %.1fs, figures %.1fs)", written["report"], loaded,
             analysis.timings["analysis_s"], analysis.timings["figures_s"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
