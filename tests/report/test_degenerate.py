"""The analysis and its prose on small, degenerate result sets: no crash, no warning, no bare NaN.

Random small studies (1-4 models, 1-3 strategies, a few datasets of 2-12 instances, statistics
drawn from {0, 1, 2} so ties, zeros and constant scores are common, cells missing or NaN) are
built in memory as :func:`src.report.results.build_results` builds them from MLflow. Every
number the prose states must be a number: where it is undefined the prose says why instead
of printing ``nan`` or a dash.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
from hypothesis import HealthCheck, example, given, settings, strategies as st

from src.report import prose
from src.report.analysis import run_analysis
from src.report.results import build_results
from src.report.summary import analysis_summary
from src.study import DATASETS, STRATEGY_ORDER, TASK_ORDER
from tests.helpers.analysis_settings import STUDY

#: A number the prose could not state: pandas/numpy's ``nan``/``inf`` or :func:`src.report.tables.fmt`'s dash.
UNDEFINED = re.compile(r"\bnan\b|\binf\b|–", re.IGNORECASE)
SIZE_RANGE = re.compile(r"([0-9.]+)B to ([0-9.]+)B parameters")
TASK_DATASETS = {task: [d for d, spec in DATASETS.items() if task in spec.tasks] for task in TASK_ORDER}


def run_row(config: str, n: int, model: dict, strategy: str) -> dict:
    kind = "finetuned" if strategy == "finetuned" else "prompted"
    return {
        "config": config,
        "run_id": f"run{n}",
        "start_time": n,
        "model": model["name"],
        "strategy": strategy,
        "kind": kind,
        "family": model["family"],
        "architecture": model["architecture"],
        "params_total_b": model["size"],
        "params_active_b": model["size"],
        "inductive_plus": "I" in strategy,
        "size_series": model["series"],
        "git_commit": "c0ffee",
        "data_version": "raw:x/datasets:y",
        "seed": 13,
        "summary": f"{config}.json",
    }


@st.composite
def instance_stats(draw, n: int) -> np.ndarray:
    """(n, 3) word-LCS statistics: all zero, one repeated row, or rows of small integers."""
    shape = draw(st.sampled_from(["zero", "constant", "mixed"]))
    row = st.tuples(st.integers(0, 2), st.integers(0, 2)).flatmap(
        lambda pg: st.tuples(st.integers(0, min(pg)), st.just(pg[0]), st.just(pg[1]))
    )
    if shape == "zero":
        return np.zeros((n, 3))
    if shape == "constant":
        return np.tile(np.asarray(draw(row), dtype=np.float64), (n, 1))
    return np.asarray(draw(st.lists(row, min_size=n, max_size=n)), dtype=np.float64)


@st.composite
def small_studies(draw) -> tuple[list[dict], dict, dict]:
    """(runs, metrics, artifacts) as :func:`build_results` takes them, for a random small study."""
    models = [
        {
            "name": f"m{k}",
            "family": draw(st.sampled_from(["fa", "fb"])),
            "architecture": draw(st.sampled_from(["dense", "moe"])),
            "size": draw(st.sampled_from([1.0, 7.0, 13.0, float("nan")])),
            "series": draw(st.sampled_from(["s", "s", "t", None])),
            "coverage": draw(st.sampled_from(["scored", "scored", "unscored", "mixed"])),
        }
        for k in range(draw(st.integers(1, 4)))
    ]
    strategies = draw(st.lists(st.sampled_from(STRATEGY_ORDER), min_size=1, max_size=3, unique=True))
    pairs = [(m, s) for m in models for s in strategies]
    chosen = draw(st.lists(st.sampled_from(range(len(pairs))), min_size=1, max_size=len(pairs), unique=True))
    configs = [(f"{pairs[k][0]['name']}-{pairs[k][1]}", pairs[k][0], pairs[k][1]) for k in sorted(chosen)]
    for k in range(draw(st.integers(0, 2))):
        model = {"name": f"ft{k}", "family": "bert", "architecture": "dense", "size": 0.1, "series": None}
        model["coverage"] = draw(st.sampled_from(["scored", "mixed"]))
        configs.append((f"ft{k}-finetuned", model, "finetuned"))
    keys = []
    for task in TASK_ORDER:
        names = TASK_DATASETS[task]
        keys += [(task, d) for d in draw(st.lists(st.sampled_from(names), max_size=3, unique=True))]
    if not keys:
        keys = [("timex", "base")]
    sizes = {key: draw(st.integers(2, 12)) for key in keys}
    errors = draw(st.sampled_from(["none", "zero", "some"]))  # error counts: not logged, all zero, small
    no_errors = {key for key in keys if errors == "zero" or draw(st.booleans())}
    cells = {
        "scored": ["both"],  # a model's configurations scored on every dataset
        "unscored": ["nan", "absent"],  # every F1 of its configurations NaN or missing
        "mixed": ["both", "both", "metric", "nan", "absent"],
    }
    runs, metrics, artifacts = [], {}, {}
    for n, (config, model, strategy) in enumerate(configs):
        runs.append(run_row(config, n, model, strategy))
        metrics[config], artifacts[config] = {}, {}
        coverage = cells[model["coverage"]]
        for task, dataset in keys:
            cell = draw(st.sampled_from(coverage))
            if cell == "absent":
                continue
            prefix = f"{task}.{dataset}."
            if cell == "nan":
                metrics[config][prefix + "f1"] = float("nan")
                continue
            if cell == "metric":
                metrics[config][prefix + "f1"] = draw(st.sampled_from([0.0, 0.5, 1.0]))
            else:
                size = sizes[task, dataset]
                ids = [f"i{k}" for k in range(size)]
                cut = draw(st.sampled_from(["all", "all", "head", "tail"]))
                ids = {"all": ids, "head": ids[: max(1, size // 2)], "tail": ids[size // 2 :]}[cut]
                stats = draw(instance_stats(len(ids)))
                totals = stats.sum(axis=0)
                denominator = totals[1] + totals[2]
                metrics[config][prefix + "f1"] = 2 * totals[0] / denominator if denominator else 0.0
                artifacts[config][task, dataset] = {"ids": ids, "stats": {"lcs": stats.tolist()}}
            if errors != "none":
                for name in ("missing", "spurious", "boundary"):
                    count = 0 if (task, dataset) in no_errors else draw(st.integers(0, 2))
                    metrics[config][f"{prefix}errors.{name}"] = float(count)
    return runs, metrics, artifacts


def prose_lines(analysis, tmp_table) -> list[str]:
    """Every prose section, called under the conditions :func:`src.report.writer.build_report` calls it."""
    lines = prose.method_lines(analysis) + prose.instance_lines(analysis)
    lines += prose.rq1_sentences(analysis) + prose.rq2_sentences(analysis)
    pairs = analysis.strategy_pairs
    if not pairs.empty and pairs["pairs"].sum() > 0:
        lines += prose.pair_sentences(
            pairs, lambda r: f"{r['strategy_a']} vs {r['strategy_b']}", "cells", analysis.corrections
        )
    if not analysis.dense_vs_moe.empty:
        lines += prose.pair_sentences(
            analysis.dense_vs_moe, lambda r: f"family {r['family']}", "comparisons", analysis.corrections
        )
    if analysis.series:
        lines += prose.size_sentences(analysis)
    if not analysis.errors.empty:
        lines += prose.error_sentences(analysis.errors)
    lines += prose.finetuned_lines(analysis, {"finetuned_pairwise": tmp_table})
    return lines


def check_study(study, correction: str, tmp_table) -> list[str]:
    """Analyse, write the prose and the summary with every warning an error; return the prose."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        analysis = run_analysis(
            build_results(*study, "sqlite:///x.db", "tempgen", "1"), 20, 0, 0.05, correction, **STUDY
        )
        lines = prose_lines(analysis, tmp_table)
        analysis_summary(analysis)
    stated = [line for line in lines if not line.startswith("|")]  # markdown tables show missing cells as a dash
    undefined = [line for line in stated if UNDEFINED.search(line)]
    assert not undefined, undefined
    for group, corr in analysis.rq2.items():
        line = next(line for line in lines if line.startswith(f"- **{group}**"))
        if not corr.computed or corr.rho.isna().any().any():
            assert corr.reason and corr.reason in line, line  # every missing rho is explained
    for low, high in SIZE_RANGE.findall("\n".join(lines)):
        assert float(low) < float(high), (low, high)  # a size curve spans two sizes at least
    return lines


def study_of(models: dict, scores: dict, errors: dict | None = None) -> tuple[list[dict], dict, dict]:
    """A study from ``config -> (model, strategy)`` and ``config -> {(task, dataset): F1 or (N, 3) stats}``.

    ``errors`` maps a (task, dataset) to the (missing, spurious, boundary) counts every configuration logged there.
    """
    runs, metrics, artifacts = [], {}, {}
    for n, (config, (model, strategy)) in enumerate(models.items()):
        runs.append(run_row(config, n, model, strategy))
        metrics[config], artifacts[config] = {}, {}
        for (task, dataset), value in scores.get(config, {}).items():
            prefix = f"{task}.{dataset}."
            if isinstance(value, np.ndarray):
                totals = value.sum(axis=0)
                metrics[config][prefix + "f1"] = 2 * totals[0] / (totals[1] + totals[2])
                ids = [f"i{k}" for k in range(len(value))]
                artifacts[config][task, dataset] = {"ids": ids, "stats": {"lcs": value.tolist()}}
            else:
                metrics[config][prefix + "f1"] = value
            for name, count in zip(("missing", "spurious", "boundary"), (errors or {}).get((task, dataset), ())):
                metrics[config][f"{prefix}errors.{name}"] = float(count)
    return runs, metrics, artifacts


def dense_model(name: str, size: float, series: str | None = "s") -> dict:
    return {"name": name, "family": "fa", "architecture": "dense", "size": size, "series": series}


def one_dataset_study(scores=(0.0, 0.5, 1.0)):
    """Three prompted configurations scored on one dataset, with differing F1 (the pilot's crash)."""
    solo = dense_model("m", 1.0, None)
    return study_of(
        {f"m-{s}": (solo, s) for s in ("I", "D", "A")},
        {f"m-{s}": {("timex", "base"): np.tile([2 * f1, 2.0, 2.0], (4, 1))} for s, f1 in zip(("I", "D", "A"), scores)},
    )


NAN = float("nan")
#: Two sizes of one series, neither with an F1 (every F1 NaN): the size curves had no columns (KeyError).
UNSCORED_SERIES = study_of(
    {"a-I": (dense_model("a", 1.0), "I"), "b-I": (dense_model("b", 7.0), "I")},
    {"a-I": {("timex", "base"): NAN}, "b-I": {("timex", "base"): NAN}},
)
#: Series s scored, series t not: its sentence indexed the sizes of an empty curve (IndexError).
ONE_SERIES_UNSCORED = study_of(
    {
        "a-I": (dense_model("a", 1.0), "I"),
        "b-I": (dense_model("b", 7.0), "I"),
        "c-I": (dense_model("c", 1.0, "t"), "I"),
        "d-I": (dense_model("d", 7.0, "t"), "I"),
    },
    {"a-I": {("timex", "base"): 0.5}, "b-I": {("timex", "base"): 0.4}},
)
#: Only the 1B model of a 1B/7B series scored: the report said "1.0B to 1.0B".
ONE_SIZE_SCORED = study_of(
    {"a-I": (dense_model("a", 1.0), "I"), "b-I": (dense_model("b", 7.0), "I")}, {"a-I": {("timex", "base"): 0.5}}
)
#: No error counted on timex/t2c nor on the other timex set: the shares were printed as dashes.
NO_ERRORS = study_of(
    {"a-I": (dense_model("a", 1.0, None), "I")},
    {"a-I": {("timex", "base"): 0.5, ("timex", "t2c"): 0.5}},
    {("timex", "base"): (0, 0, 0), ("timex", "t2c"): (0, 0, 0)},
)
#: Three configurations on two datasets, one of them constant: only the diagonal had a rho (All-NaN slice).
CONSTANT_DATASET = study_of(
    {f"m-{s}": (dense_model("m", 1.0, None), s) for s in ("I", "D", "A")},
    {f"m-{s}": {("timex", "base"): f1, ("timex", "adv"): 0.5} for s, f1 in zip(("I", "D", "A"), (0.1, 0.2, 0.3))},
)


@example(study=one_dataset_study(), correction="holm").via("pilot: one dataset whose F1 varies")
@example(study=CONSTANT_DATASET, correction="holm").via("rho defined on the diagonal only")
@example(study=UNSCORED_SERIES, correction="bh").via("a size series without any F1")
@example(study=ONE_SERIES_UNSCORED, correction="holm").via("one of two size series without any F1")
@example(study=ONE_SIZE_SCORED, correction="holm").via("a size series with one scored size")
@example(study=NO_ERRORS, correction="holm").via("no error counted")
@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(study=small_studies(), correction=st.sampled_from(["holm", "bh"]))
def test_the_analysis_of_any_small_study_states_numbers_or_says_why(study, correction, tmp_path):
    check_study(study, correction, fake_table(tmp_path))


def fake_table(tmp_path):
    """The fine-tuned pairwise table's path (its markdown is read by :func:`prose.finetuned_lines`)."""
    table = tmp_path / "finetuned_pairwise.csv"
    table.with_suffix(".md").write_text("| table |", encoding="utf-8")
    return table


def lines_of(study, tmp_path, start: str) -> list[str]:
    return [line for line in check_study(study, "holm", fake_table(tmp_path)) if line.startswith(start)]


def test_one_dataset_says_there_is_no_pair_of_datasets_to_correlate(tmp_path):
    assert lines_of(one_dataset_study(), tmp_path, "- **all**") == [
        "- **all** (3 configurations): no correlation computed: only 1 dataset(s) (timex/base); "
        "a rank correlation between datasets needs at least 2."
    ]


def test_a_constant_dataset_leaves_no_correlation_and_says_where(tmp_path):
    assert lines_of(CONSTANT_DATASET, tmp_path, "- **all**") == [
        "- **all** (3 configurations): no correlation computed: all configurations score the same on "
        "timex/adv, so no rank order there."
    ]


def test_a_size_series_without_scores_says_so(tmp_path):
    assert lines_of(UNSCORED_SERIES, tmp_path, "- **s**") == [
        "- **s** (2 models: a, b): none of its models has an F1 score, so there is no size curve."
    ]
    assert lines_of(ONE_SERIES_UNSCORED, tmp_path, "- **t**") == [
        "- **t** (2 models: c, d): none of its models has an F1 score, so there is no size curve."
    ]


def test_a_size_series_scored_at_one_size_has_no_curve(tmp_path):
    assert lines_of(ONE_SIZE_SCORED, tmp_path, "- **s**") == [
        "- **s** (2 models: a, b): only the 1.0B model(s) have an F1 score (mean 0.500), so there is no size curve."
    ]


def test_two_sizes_give_a_curve_but_no_rank_correlation(tmp_path):
    assert lines_of(ONE_SERIES_UNSCORED, tmp_path, "- **s**") == [
        "- **s** (2 models, 1.0B to 7.0B parameters): mean F1 over strategies and datasets is 0.500 at the "
        "smallest size and 0.400 at the largest. Size and F1 have no rank correlation on any dataset: it needs "
        "F1 at 3 or more sizes, not all equal."
    ]


def test_datasets_without_counted_errors_have_no_shares_and_say_so(tmp_path):
    assert lines_of(NO_ERRORS, tmp_path, "- No") == [
        "- No missing, spurious or boundary error was counted on timex/base, timex/t2c, so no error shares there."
    ]
    assert lines_of(NO_ERRORS, tmp_path, "- **timex/t2c**") == []
