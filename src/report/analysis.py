"""The study's analysis as computation: a loaded :class:`~src.report.results.RunResults` -> :class:`Analysis`.

Runs every calibrated pairwise test (:mod:`src.scoring.calibrated`; each pair on the instances
both configurations were scored on), answers RQ1-RQ3 with the raw p < alpha beside a multiple-comparison
correction, compares the fine-tuned models with each other (their own correction family),
and records which run, commit and data version every configuration's numbers came from.
Nothing here writes a file: ``src.analyze`` (the entry point) loads, calls and writes;
``figures`` and ``writer`` draw from the returned :class:`Analysis`.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from src import study as vocabulary
from src.report import comparisons, rq
from src.report.provenance import is_dirty
from src.report.results import RunResults
from src.report.robustness import robustness_table
from src.report.uncertainty import interval_widths, power_table, rq2_intervals
from src.scoring.clustered import DOCUMENT, INSTANCE

#: The two multiple-comparison families: RQ1-RQ3 over prompted configurations, and fine-tuned models among themselves.
PROMPTED, FINETUNED = "prompted", "fine-tuned"


@dataclass(frozen=True)
class AnalysisSettings:
    """How the tests were run: bootstrap resamples and seed, significance level, correction, the
    equivalence margin, the resampling unit (documents or instances), the power the minimum
    detectable differences are stated at and the flip threshold of the robustness table."""

    resamples: int
    seed: int
    alpha: float
    correction: str
    margin: float
    unit: str
    power: float
    flip_threshold: float


@dataclass
class Analysis:
    """Every computed result the figures and the report draw from."""

    results: RunResults
    settings: AnalysisSettings
    dimensions: dict[str, list[str]]
    groups: dict[str, list[str]]
    f1: pd.DataFrame
    prompted: comparisons.ComparisonFamily
    finetuned: comparisons.ComparisonFamily
    rq1: pd.DataFrame
    rq2: dict[str, rq.Correlation]
    strategy_pairs: pd.DataFrame
    dense_vs_moe: pd.DataFrame
    dense_vs_moe_reason: str | None
    series: dict[str, list[str]]
    size_curves: pd.DataFrame
    size_trend: pd.DataFrame
    errors: pd.DataFrame
    provenance: pd.DataFrame
    top_gold: dict[str, dict] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    power: pd.DataFrame = field(default_factory=pd.DataFrame)
    widths: pd.DataFrame = field(default_factory=pd.DataFrame)
    robustness: pd.DataFrame = field(default_factory=pd.DataFrame)
    rq2_intervals: dict[str, tuple[float, float]] = field(default_factory=dict)

    resamples = property(lambda self: self.settings.resamples, doc="Bootstrap resamples per comparison.")
    seed = property(lambda self: self.settings.seed, doc="The seed of every resample.")
    alpha = property(lambda self: self.settings.alpha, doc="The significance level.")
    correction = property(lambda self: self.settings.correction, doc="The multiple-comparison correction.")

    @property
    def corrections(self) -> tuple[str, str]:
        return ("none", self.correction)

    @property
    def tests(self) -> dict[str, comparisons.PairwiseTests]:
        """The prompted configurations' tests (RQ1-RQ3)."""
        return self.prompted.tests

    @property
    def p_adjusted(self) -> dict[str, np.ndarray]:
        return self.prompted.p_adjusted

    @property
    def outcomes(self) -> dict[str, dict[str, pd.DataFrame]]:
        return self.prompted.outcomes

    @property
    def families(self) -> tuple[comparisons.ComparisonFamily, comparisons.ComparisonFamily]:
        return (self.prompted, self.finetuned)


def load_dimensions() -> dict[str, list[str]]:
    """Generalization dimension -> ``task/dataset`` keys, from the study vocabulary (``src.study``)."""
    return {dimension: list(keys) for dimension, keys in vocabulary.dimension_keys().items()}


def strategy_groups(runs: pd.DataFrame) -> dict[str, list[str]]:
    """Prompted configurations: all, inductive+ and non-inductive, by the study's strategy groups.

    A strategy outside the study's vocabulary belongs to ``all`` only.
    """
    prompted = runs[runs["kind"] == "prompted"]
    groups = vocabulary.strategy_groups()
    return {
        "all": list(prompted.index),
        "inductive+": list(prompted.index[prompted["strategy"].isin(groups["inductive+"])]),
        "non-inductive": list(prompted.index[prompted["strategy"].isin(groups["non-inductive"])]),
    }


def provenance_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Configuration -> the summary file, run key, code version and data version its numbers came
    from: what any machine that re-runs the study computes alike (a DVC output's content)."""
    table = pd.DataFrame(
        {
            "summary": runs["summary"] if "summary" in runs.columns else None,
            "key": runs["key"] if "key" in runs.columns else None,
            "code_version": runs["code_version"] if "code_version" in runs.columns else None,
            "data_version": runs["data_version"],
        },
        index=runs.index,
    )
    table.index.name = "configuration"
    return table


def history_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Configuration -> the run id and git commit (dirty or not) of the run this machine logged or
    restored: its history, shown on the provenance page only (:mod:`src.tracking.history`)."""
    commits = runs["git_commit"] if "git_commit" in runs.columns else pd.Series(None, index=runs.index)
    table = pd.DataFrame(
        {"run_id": runs["run_id"], "git_commit": commits, "dirty": [is_dirty(c) for c in commits]},
        index=runs.index,
    )
    table.index.name = "configuration"
    return table


def run_analysis(
    results: RunResults,
    resamples: int,
    seed: int,
    alpha: float,
    correction: str,
    *,
    margin: float,
    power: float,
    flip_threshold: float,
    unit: str = DOCUMENT,
    dimensions: dict[str, list[str]] | None = None,
) -> Analysis:
    """Compute RQ1-RQ3 and the fine-tuned comparisons from loaded run results (no file is written);
    every setting is given: their values are params.yaml's ``analysis`` block, read by :mod:`src.analyze`."""
    if correction not in comparisons.CORRECTIONS:
        raise ValueError(f"unknown correction {correction!r}; choose one of {sorted(comparisons.CORRECTIONS)}")
    timings = {}
    started = time.perf_counter()
    dimensions = dimensions if dimensions is not None else load_dimensions()
    groups = strategy_groups(results.runs)
    prompted = set(groups["all"])
    options = {"margin": margin, "unit": unit, "power": power}
    family = comparisons.comparison_family(
        PROMPTED, results.datasets, groups["all"], resamples, seed, alpha, correction, **options
    )
    finetuned_configs = [c for c in results.runs.index if results.runs.loc[c, "kind"] == "finetuned"]
    finetuned = comparisons.comparison_family(
        FINETUNED, results.datasets, finetuned_configs, resamples, seed, alpha, correction, **options
    )
    timings["pairwise_tests_s"] = time.perf_counter() - started
    outcomes = family.outcomes
    f1 = rq.score_table(results.scores, groups["all"])
    links = rq.reference_links(list(outcomes["none"]))
    rq1 = pd.concat(
        [rq.rq1_transfer(outcomes[c], links, groups).assign(correction=c) for c in ("none", correction)],
        ignore_index=True,
    )
    strategy_pairs = pd.concat(
        [
            rq.rq3_strategy_pairs(outcomes[c], results.runs, dimensions).assign(correction=c)
            for c in ("none", correction)
        ],
        ignore_index=True,
    )
    moe_tables, reason = [], None
    for c in ("none", correction):
        table, reason = rq.rq3_dense_vs_moe(outcomes[c], results.runs, dimensions)
        moe_tables.append(table.assign(correction=c) if not table.empty else table)
    series = rq.size_series(results.runs)
    curves, trend = rq.size_curves(f1, results.runs, series)
    analysis = Analysis(
        results=results,
        settings=AnalysisSettings(resamples, seed, alpha, correction, margin, unit, power, flip_threshold),
        dimensions=dimensions,
        groups=groups,
        f1=f1,
        prompted=family,
        finetuned=finetuned,
        rq1=rq1,
        rq2=rq.rq2_correlations(f1, groups, correction),
        strategy_pairs=strategy_pairs,
        dense_vs_moe=pd.concat(moe_tables, ignore_index=True),
        dense_vs_moe_reason=reason,
        series=series,
        size_curves=curves,
        size_trend=trend,
        errors=rq.error_breakdown(results.scores[results.scores["config"].isin(prompted)]),
        provenance=provenance_table(results.runs),
        timings=timings,
    )
    analysis.power = power_table((family, finetuned), alpha, power)
    analysis.widths = interval_widths(results.datasets, resamples, seed)
    analysis.results = dataclasses.replace(results, scores=with_intervals(results.scores, analysis.widths, unit))
    analysis.robustness = robustness_table(
        results.datasets, resamples, seed, threshold=flip_threshold, alpha=alpha, unit=unit
    )
    analysis.rq2_intervals = rq2_intervals(results.datasets, f1, groups, resamples, seed)
    timings["analysis_s"] = time.perf_counter() - started
    return analysis


def with_intervals(scores: pd.DataFrame, intervals: pd.DataFrame, unit: str) -> pd.DataFrame:
    """``scores`` with ``f1_ci_low``/``f1_ci_high`` from the analysis's resampling ``unit`` (the logged,
    instance-level ones are replaced where the analysis has the configuration's statistics) and
    ``f1_ci_low_instance``/``f1_ci_high_instance``: the study's instance-level interval beside them."""
    if intervals.empty or scores.empty:
        return scores
    scores = scores.copy()
    keys = scores["config"] + "|" + scores["task"] + "/" + scores["dataset"]
    for chosen, suffix in ((unit, ""), (INSTANCE, "_instance")):
        part = intervals[intervals["unit"] == chosen]
        index = part["configuration"] + "|" + part["dataset"]
        for bound in ("f1_ci_low", "f1_ci_high"):
            found = keys.map(dict(zip(index, part[bound])))
            logged = scores[bound] if bound in scores.columns else np.nan
            scores[bound + suffix] = found.where(found.notna(), logged if not suffix else np.nan)
    return scores


def instance_table(analysis: Analysis) -> pd.DataFrame:
    """How many instances each comparison used: one row per (family, dataset, instance count) with its pairs.

    ``instances = 0`` rows count pairs that share no instance (untested).
    """
    rows = []
    for family in analysis.families:
        for key, test in family.tests.items():
            for n, pairs in test.instance_counts():
                rows.append({"family": family.name, "dataset": key, "instances": n, "pairs": pairs})
    return pd.DataFrame(rows, columns=["family", "dataset", "instances", "pairs"])


def finetuned_pairs(analysis: Analysis) -> pd.DataFrame:
    """Fine-tuned model a vs b on each dataset (the study's Figure 11): n, F1s, delta, p-values, outcomes."""
    return pairwise_long(analysis.finetuned, analysis.correction)


def pairwise_long(family: comparisons.ComparisonFamily, correction: str) -> pd.DataFrame:
    """Every tested pair of a family: instances and documents, F1s on them, the delta with its interval,
    the calibrated two-sided and TOST p (raw and corrected), the verdicts, and the study's one-sided
    bootstrap p with its reading beside (named as the study's)."""
    frames = []
    for key, test in family.tests.items():
        i, j = np.triu_indices(len(test.configs), 1)
        keep = test.tested[i, j]
        i, j = i[keep], j[keep]
        configs = np.asarray(test.configs, dtype=object)
        nan = np.full_like(test.p_value, np.nan)
        raw = family.outcomes["none"][key].to_numpy()
        corrected = family.outcomes[correction][key].to_numpy()
        study_raw = family.study_outcomes["none"][key].to_numpy() if family.study_outcomes else raw
        study = family.study_outcomes[correction][key].to_numpy() if family.study_outcomes else corrected
        two_sided = test.p_two_sided if test.p_two_sided is not None else nan
        adjusted = np.fmin(family.p_adjusted[key], family.p_adjusted[key].T)
        tost = test.p_equivalent if test.p_equivalent is not None else nan
        tost_adjusted = family.equivalence_adjusted.get(key, nan)
        frames.append(
            pd.DataFrame(
                {
                    "dataset": key,
                    "config_a": configs[i],
                    "config_b": configs[j],
                    "instances": test.instances[i, j],
                    "documents": (test.documents if test.documents is not None else test.instances)[i, j],
                    "f1_a": test.f1[i, j],
                    "f1_b": test.f1[j, i],
                    "delta": test.f1[i, j] - test.f1[j, i],
                    "ci_low": (test.ci_low if test.ci_low is not None else nan)[i, j],
                    "ci_high": (test.ci_high if test.ci_high is not None else nan)[i, j],
                    "p_value": two_sided[i, j],
                    f"p_{correction}": adjusted[i, j],
                    "p_equivalent": tost[i, j],
                    f"p_equivalent_{correction}": tost_adjusted[i, j],
                    "outcome": raw[i, j],
                    f"outcome_{correction}": corrected[i, j],
                    "p_a_better": test.p_value[i, j],
                    "p_b_better": test.p_value[j, i],
                    "study_outcome": study_raw[i, j],
                    f"study_outcome_{correction}": study[i, j],
                }
            )
        )
    columns = [
        "dataset",
        "config_a",
        "config_b",
        "instances",
        "documents",
        "f1_a",
        "f1_b",
        "delta",
        "ci_low",
        "ci_high",
        "p_value",
        f"p_{correction}",
        "p_equivalent",
        f"p_equivalent_{correction}",
        "outcome",
        f"outcome_{correction}",
        "p_a_better",
        "p_b_better",
        "study_outcome",
        f"study_outcome_{correction}",
    ]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
