"""The study's research questions as pure functions on arrays and DataFrames.

* Pairwise tests: one shared resample matrix per dataset, every pair of configurations
  tested at once (``src.scoring.stats.all_pairs_bootstrap``); a multiple-comparison correction
  over the family of all pairwise tests of the study (every unordered pair on every
  dataset), applied to the one-sided p-value in the observed direction.
* RQ1: for ordered pairs (i, j) with i significantly better than j on a reference
  (base) dataset, the share of pairs where i is better / equal / worse on a target.
* RQ2: dataset-by-dataset Spearman matrices of configurations' F1.
* RQ3: strategy pairs over models, MoE vs dense within a family, size curves, error types.

Outcome tables are DataFrames (configs x configs) of "better"/"equal"/"worse" for the
row configuration against the column one.
"""

from __future__ import annotations

import itertools
import zlib
from dataclasses import dataclass
from typing import Collection, Mapping, Sequence

import numpy as np
import pandas as pd

from src.report.loading import DATASET_ORDER, STRATEGY_ORDER, TASK_ORDER, ordered_keys  # noqa: F401
from src.scoring.stats import OUTCOMES, all_pairs_bootstrap, benjamini_hochberg, classify_outcome, holm, resample_counts
from src.scoring.stats import spearman, spearman_matrix

CORRECTIONS = {"holm": holm, "bh": benjamini_hochberg}
MIN_RANKED = 3


@dataclass
class PairwiseTests:
    """All pairwise paired bootstrap tests on one dataset.

    Attributes:
        p_value: (S, S) one-sided p for "row better than column".
        f1_ci: (S, 2) percentile CI of each F1 from the shared resamples.
    """

    key: str
    configs: list[str]
    f1: np.ndarray
    p_value: np.ndarray
    f1_ci: np.ndarray
    instances: int


def dataset_seed(seed: int, key: str) -> np.random.Generator:
    """A generator for one dataset's resamples, fixed by the seed and the dataset name."""
    return np.random.default_rng([seed, zlib.crc32(key.encode("utf-8"))])


def pairwise_tests(stacked: Mapping[str, object], resamples: int, seed: int) -> dict[str, PairwiseTests]:
    """All-pairs tests per dataset; ``stacked`` maps a key to an object with ``configs`` and ``stats`` (S, N, 3)."""
    out = {}
    for key, data in stacked.items():
        stats = np.asarray(data.stats, dtype=np.float64)
        counts = resample_counts(stats.shape[1], resamples, dataset_seed(seed, key))
        result = all_pairs_bootstrap(stats, counts)
        out[key] = PairwiseTests(key, list(data.configs), result.f1, result.p_value, result.f1_ci(), stats.shape[1])
    return out


def directional_adjusted(tests: Mapping[str, PairwiseTests], method: str) -> dict[str, np.ndarray]:
    """Adjusted one-sided p-matrices over the family of every unordered pair on every dataset.

    Each pair enters the family once, with the p-value of its observed direction
    ``min(p_ij, p_ji)``; the adjusted value goes to that direction and the other gets 1
    (both get it on an exact tie), so ``classify_outcome(A, A.T)`` reads the outcome.
    """
    if method not in CORRECTIONS:
        raise ValueError(f"unknown correction {method!r}; choose one of {sorted(CORRECTIONS)}")
    pieces, layout = [], []
    for key, test in tests.items():
        upper_i, upper_j = np.triu_indices(len(test.configs), 1)
        p = test.p_value
        pieces.append(np.minimum(p[upper_i, upper_j], p[upper_j, upper_i]))
        layout.append((key, upper_i, upper_j))
    adjusted = CORRECTIONS[method](np.concatenate(pieces)) if pieces else np.array([])
    out, start = {}, 0
    for key, upper_i, upper_j in layout:
        p = tests[key].p_value
        values = adjusted[start:start + upper_i.size]
        start += upper_i.size
        matrix = np.ones_like(p)
        np.fill_diagonal(matrix, 1.0)
        forward = p[upper_i, upper_j] <= p[upper_j, upper_i]
        backward = p[upper_j, upper_i] <= p[upper_i, upper_j]
        matrix[upper_i[forward], upper_j[forward]] = values[forward]
        matrix[upper_j[backward], upper_i[backward]] = values[backward]
        out[key] = matrix
    return out


def outcome_table(configs: Sequence[str], p_better: np.ndarray, alpha: float) -> pd.DataFrame:
    """Configs x configs outcomes of row vs column from a one-sided p-matrix."""
    p_better = np.asarray(p_better, dtype=np.float64)
    return pd.DataFrame(classify_outcome(p_better, p_better.T, alpha), index=list(configs), columns=list(configs))


def outcome_tables(
    tests: Mapping[str, PairwiseTests], alpha: float, correction: str
) -> dict[str, dict[str, pd.DataFrame]]:
    """``{"none": {key: table}, correction: {key: table}}``: raw and corrected outcomes side by side."""
    adjusted = directional_adjusted(tests, correction)
    return {
        "none": {k: outcome_table(t.configs, t.p_value, alpha) for k, t in tests.items()},
        correction: {k: outcome_table(t.configs, adjusted[k], alpha) for k, t in tests.items()},
    }


def reference_links(keys: Collection[str]) -> list[tuple[str, str]]:
    """(reference, target) dataset pairs for RQ1: each generalization set against its task's base.

    ``comp/base`` (the compositional set) is paired with ``timex/base`` and ``eventx/base``.
    """
    links = []
    for key in ordered_keys(keys):
        task, dataset = key.split("/", 1)
        if task == "comp" and dataset == "base":
            links += [(ref, key) for ref in ("timex/base", "eventx/base") if ref in keys]
        elif dataset != "base" and f"{task}/base" in keys:
            links.append((f"{task}/base", key))
    return links


def _shares(counts: Mapping[str, int]) -> dict:
    total = sum(counts[o] for o in OUTCOMES)
    row = {"pairs": total}
    for outcome in OUTCOMES:
        row[outcome] = counts[outcome] / total if total else float("nan")
        row[f"n_{outcome}"] = counts[outcome]
    return row


def rq1_transfer(
    outcomes: Mapping[str, pd.DataFrame],
    links: Sequence[tuple[str, str]],
    groups: Mapping[str, Collection[str]],
) -> pd.DataFrame:
    """Share of target outcomes among ordered pairs significantly better on the reference.

    A pair counts in a group when both configurations belong to it and both were
    scored on reference and target. The row ``target="all"`` pools every link.
    """
    rows = []
    for group, members in groups.items():
        pooled = dict.fromkeys(OUTCOMES, 0)
        members = set(members)
        for reference, target in links:
            ref, tgt = outcomes[reference], outcomes[target]
            scored = set(tgt.index)
            common = [c for c in ref.index if c in scored and c in members]
            ref_values = ref.loc[common, common].to_numpy()
            tgt_values = tgt.loc[common, common].to_numpy()
            chosen = tgt_values[ref_values == "better"]
            counts = {o: int(np.count_nonzero(chosen == o)) for o in OUTCOMES}
            for o in OUTCOMES:
                pooled[o] += counts[o]
            rows.append({"group": group, "reference": reference, "target": target, **_shares(counts)})
        rows.append({"group": group, "reference": "base", "target": "all", **_shares(pooled)})
    return pd.DataFrame(rows)


@dataclass
class Correlation:
    """RQ2 for one group of configurations; ``reason`` says why values are missing."""

    group: str
    configs: list[str]
    rho: pd.DataFrame
    p_value: pd.DataFrame
    p_adjusted: pd.DataFrame
    reason: str | None


def _mirror_adjust(p: pd.DataFrame, method: str) -> pd.DataFrame:
    values = p.to_numpy(dtype=np.float64)
    upper_i, upper_j = np.triu_indices(values.shape[0], 1)
    adjusted = np.full_like(values, np.nan)
    adjusted[upper_i, upper_j] = CORRECTIONS[method](values[upper_i, upper_j])
    adjusted[upper_j, upper_i] = adjusted[upper_i, upper_j]
    return pd.DataFrame(adjusted, index=p.index, columns=p.columns)


def rq2_correlations(
    f1_table: pd.DataFrame, groups: Mapping[str, Collection[str]], correction: str
) -> dict[str, Correlation]:
    """Spearman matrices between datasets (columns) over the configurations (rows) of each group."""
    out = {}
    for group, members in groups.items():
        members = set(members)
        table = f1_table.loc[[c for c in f1_table.index if c in members]]
        rho, p = spearman_matrix(table)
        reason = None
        if len(table) < MIN_RANKED:
            reason = f"only {len(table)} configuration(s); a rank correlation needs at least {MIN_RANKED}"
        else:
            constant = [c for c in table.columns if table[c].dropna().nunique() < 2]
            if constant:
                reason = "all configurations score the same on " + ", ".join(constant) + ", so no rank order there"
        out[group] = Correlation(group, list(table.index), rho, p, _mirror_adjust(p, correction), reason)
    return out


def mean_off_diagonal(matrix: pd.DataFrame) -> float:
    """Mean of the defined values above the diagonal of a symmetric matrix (NaN when none)."""
    values = matrix.to_numpy(dtype=np.float64)
    upper = values[np.triu_indices(values.shape[0], 1)]
    upper = upper[~np.isnan(upper)]
    return float(upper.mean()) if upper.size else float("nan")


def _prompted(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[runs["kind"] == "prompted"]


def _strategy_rank(strategy: str) -> int:
    return STRATEGY_ORDER.index(strategy) if strategy in STRATEGY_ORDER else len(STRATEGY_ORDER)


def _dimension_rows(label: dict, counts_by_dimension: Mapping[str, Mapping[str, int]], extra: dict | None = None) -> list:
    rows, pooled = [], dict.fromkeys(OUTCOMES, 0)
    for dimension, counts in counts_by_dimension.items():
        rows.append({**label, "dimension": dimension, **_shares(counts), **(extra or {})})
        for o in OUTCOMES:
            pooled[o] += counts[o]
    rows.append({**label, "dimension": "all", **_shares(pooled), **(extra or {})})
    return rows


def rq3_strategy_pairs(
    outcomes: Mapping[str, pd.DataFrame], runs: pd.DataFrame, dimensions: Mapping[str, Sequence[str]]
) -> pd.DataFrame:
    """For every pair of strategies (a before b in the study's order), outcomes of a vs b.

    The units are (model, dataset) cells of the dimension; ``dimension="all"`` sums them.
    """
    prompted = _prompted(runs)
    strategies = sorted(set(prompted["strategy"]), key=_strategy_rank)
    by_model = {m: dict(zip(g["strategy"], g.index)) for m, g in prompted.groupby("model")}
    rows = []
    for a, b in itertools.combinations(strategies, 2):
        counts_by_dimension, models = {}, set()
        for dimension, keys in dimensions.items():
            counts = dict.fromkeys(OUTCOMES, 0)
            for key in keys:
                table = outcomes.get(key)
                if table is None:
                    continue
                for model, configs in by_model.items():
                    ca, cb = configs.get(a), configs.get(b)
                    if ca in table.index and cb in table.index:
                        counts[table.loc[ca, cb]] += 1
                        models.add(model)
            counts_by_dimension[dimension] = counts
        rows += _dimension_rows({"strategy_a": a, "strategy_b": b}, counts_by_dimension, {"models": len(models)})
    columns = ["strategy_a", "strategy_b", "dimension", "pairs", *OUTCOMES, *(f"n_{o}" for o in OUTCOMES), "models"]
    return pd.DataFrame(rows, columns=columns)


def rq3_dense_vs_moe(
    outcomes: Mapping[str, pd.DataFrame], runs: pd.DataFrame, dimensions: Mapping[str, Sequence[str]]
) -> tuple[pd.DataFrame, str | None]:
    """Outcomes of MoE vs dense models of the same family under the same strategy, per dimension.

    Returns the table and, when no family has both architectures, the reason it is empty.
    """
    prompted = _prompted(runs)
    rows = []
    for family, group in prompted.groupby("family"):
        moe = group[group["architecture"] == "moe"]
        dense = group[group["architecture"] == "dense"]
        if moe.empty or dense.empty:
            continue
        pairs = [(m, d) for m in moe.index for d in dense.index if moe.loc[m, "strategy"] == dense.loc[d, "strategy"]]
        counts_by_dimension = {}
        for dimension, keys in dimensions.items():
            counts = dict.fromkeys(OUTCOMES, 0)
            for key in keys:
                table = outcomes.get(key)
                for m, d in pairs:
                    if table is not None and m in table.index and d in table.index:
                        counts[table.loc[m, d]] += 1
            counts_by_dimension[dimension] = counts
        label = {
            "family": family,
            "moe_models": ", ".join(sorted(set(moe["model"]))),
            "dense_models": ", ".join(sorted(set(dense["model"]))),
        }
        rows += _dimension_rows(label, counts_by_dimension)
    if rows:
        return pd.DataFrame(rows), None
    found = "; ".join(
        f"{family}: {', '.join(sorted(set(g['architecture'])))}" for family, g in prompted.groupby("family")
    )
    return pd.DataFrame(), f"needs more models: no family has both a dense and a MoE model (families: {found or 'none'})"


def size_series(runs: pd.DataFrame) -> dict[str, list[str]]:
    """Model series for the size analysis: the ``size_series`` param/tag, else dense families at 2+ sizes."""
    prompted = _prompted(runs).dropna(subset=["params_total_b"])
    out = {}
    tagged = prompted.dropna(subset=["size_series"])
    for name, group in tagged.groupby("size_series"):
        if group["params_total_b"].nunique() >= 2:
            out[str(name)] = sorted(set(group["model"]), key=lambda m: group[group["model"] == m]["params_total_b"].iloc[0])
    if out:
        return out
    dense = prompted[prompted["architecture"] == "dense"]
    for family, group in dense.groupby("family"):
        if group["params_total_b"].nunique() >= 2:
            out[str(family)] = sorted(set(group["model"]), key=lambda m: group[group["model"] == m]["params_total_b"].iloc[0])
    return out


def size_curves(
    f1_table: pd.DataFrame, runs: pd.DataFrame, series: Mapping[str, Sequence[str]]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Mean F1 over strategies per (series, model, dataset), and Spearman of size vs that F1.

    Returns (curves, trend): ``curves`` has series, model, params_total_b, dataset, f1,
    strategies; ``trend`` has series, dataset, sizes, rho, p_value (NaN under 3 sizes).
    """
    curve_rows, trend_rows = [], []
    for name, models in series.items():
        for dataset in f1_table.columns:
            points = []
            for model in models:
                configs = [c for c in runs.index[runs["model"] == model] if c in f1_table.index]
                values = f1_table.loc[configs, dataset].dropna()
                if values.empty:
                    continue
                size = float(runs.loc[configs[0], "params_total_b"])
                points.append((size, float(values.mean())))
                curve_rows.append({
                    "series": name, "model": model, "params_total_b": size, "dataset": dataset,
                    "f1": float(values.mean()), "strategies": int(values.size),
                })
            if points:
                sizes, scores = zip(*points)
                rho, p, n = spearman(sizes, scores)
                trend_rows.append({"series": name, "dataset": dataset, "sizes": n, "rho": rho, "p_value": p})
    return pd.DataFrame(curve_rows), pd.DataFrame(trend_rows)


def error_breakdown(scores: pd.DataFrame) -> pd.DataFrame:
    """Missing, spurious and boundary errors per dataset, summed over configurations, with shares."""
    columns = [f"errors.{e}" for e in ("missing", "spurious", "boundary")]
    present = scores.dropna(subset=[c for c in columns if c in scores.columns])
    if present.empty or not all(c in scores.columns for c in columns):
        return pd.DataFrame(columns=["dataset", "configs", "missing", "spurious", "boundary"])
    present = present.assign(dataset_key=present["task"] + "/" + present["dataset"])
    table = present.groupby("dataset_key")[columns].sum()
    table = table.loc[ordered_keys(table.index)]
    table.columns = ["missing", "spurious", "boundary"]
    total = table.sum(axis=1)
    for name in ("missing", "spurious", "boundary"):
        table[f"share_{name}"] = np.where(total > 0, table[name] / total.where(total > 0, 1), np.nan)
    table.insert(0, "configs", present.groupby("dataset_key").size())
    return table.rename_axis("dataset").reset_index()


def score_table(scores: pd.DataFrame, configs: Sequence[str], value: str = "f1") -> pd.DataFrame:
    """Configs x ``task/dataset`` table of one logged metric (rows in ``configs`` order)."""
    subset = scores[scores["config"].isin(configs)]
    if subset.empty or value not in subset.columns:
        return pd.DataFrame(index=list(configs))
    keyed = subset.assign(dataset_key=subset["task"] + "/" + subset["dataset"])
    table = keyed.pivot(index="config", columns="dataset_key", values=value)
    table = table[ordered_keys(table.columns)]
    table.columns.name = None
    return table.reindex([c for c in configs if c in table.index])
