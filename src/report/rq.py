"""The study's research questions as pure functions on arrays and DataFrames.

They read the pairwise comparisons of :mod:`src.report.comparisons`.

* RQ1: for ordered pairs (i, j) with i significantly better than j on a reference
  (base) dataset, the share of pairs where i is better / equivalent / inconclusive / worse
  on a target (:mod:`src.scoring.verdicts`), with the study's "almost equal" (equivalent +
  inconclusive) beside them.
* RQ2: dataset-by-dataset Spearman matrices of configurations' F1.
* RQ3: strategy pairs over models, MoE vs dense within a family, size curves, error types.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from src.report.comparisons import CORRECTIONS
from src.report.results import ordered_keys
from src.scoring.metrics import ERROR_TYPES
from src.scoring.stats import spearman, spearman_matrix
from src.scoring.verdicts import EQUIVALENT, INCONCLUSIVE, VERDICTS as OUTCOMES
from src.study import STRATEGY_ORDER

MIN_RANKED = 3


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
    study = counts[EQUIVALENT] + counts[INCONCLUSIVE]
    row["study_almost_equal"] = study / total if total else float("nan")
    row["n_study_almost_equal"] = study
    return row


@dataclass(frozen=True)
class Cells:
    """An outcome table as an array with its names' positions: scalar and block reads without pandas indexing
    (at paper scale RQ1 and RQ3 read tens of thousands of cells)."""

    names: list[str]
    position: dict[str, int]
    values: np.ndarray

    def get(self, row: str | None, column: str | None) -> str | None:
        """The outcome of ``row`` vs ``column``; None when either is not in the table."""
        i, j = self.position.get(row), self.position.get(column)
        return None if i is None or j is None else self.values[i, j]

    def block(self, names: Sequence[str]) -> np.ndarray:
        index = np.array([self.position[n] for n in names], dtype=np.int64)
        return self.values[np.ix_(index, index)]


def cells(table: pd.DataFrame) -> Cells:
    """The table's :class:`Cells`, built once per table (kept in ``table.attrs``: RQ1 and RQ3 read each often)."""
    found = table.attrs.get("cells")
    if isinstance(found, Cells) and found.values.shape == table.shape:
        return found
    names = [str(n) for n in table.index]
    made = Cells(names, {n: k for k, n in enumerate(names)}, table.to_numpy())
    table.attrs["cells"] = made
    return made


def rq1_transfer(
    outcomes: Mapping[str, pd.DataFrame],
    links: Sequence[tuple[str, str]],
    groups: Mapping[str, Collection[str]],
) -> pd.DataFrame:
    """Share of target outcomes among ordered pairs significantly better on the reference.

    A pair counts in a group when both configurations belong to it and the pair was
    tested on both reference and target (each on the instances both configurations
    share there). The row ``target="all"`` pools every link.
    """
    rows = []
    tables = {key: cells(outcomes[key]) for link in links for key in link}
    for group, members in groups.items():
        pooled = dict.fromkeys(OUTCOMES, 0)
        members = set(members)
        for reference, target in links:
            ref, tgt = tables[reference], tables[target]
            common = [c for c in ref.names if c in tgt.position and c in members]
            chosen = tgt.block(common)[ref.block(common) == "better"]
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

    @property
    def computed(self) -> bool:
        """Some pair of datasets has a rho (the diagonal alone, a dataset with itself, correlates nothing)."""
        return not np.isnan(mean_off_diagonal(self.rho))


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
        reason = _undefined_reason(table, rho)
        out[group] = Correlation(group, list(table.index), rho, p, _mirror_adjust(p, correction), reason)
    return out


def _undefined_reason(table: pd.DataFrame, rho: pd.DataFrame) -> str | None:
    """Why some dataset pairs of a group have no rho (None when every pair has one): the report states it."""
    if len(table) < MIN_RANKED:
        return f"only {len(table)} configuration(s); a rank correlation needs at least {MIN_RANKED}"
    columns = list(table.columns)
    if len(columns) < 2:
        named = f" ({columns[0]})" if columns else ""
        return f"only {len(columns)} dataset(s){named}; a rank correlation between datasets needs at least 2"
    values = rho.to_numpy(dtype=np.float64)
    upper_i, upper_j = np.triu_indices(len(columns), 1)
    missing = [(columns[i], columns[j]) for i, j in zip(upper_i, upper_j) if np.isnan(values[i, j])]
    if not missing:
        return None
    scored = table.notna().sum()
    sparse = [c for c in columns if scored[c] < MIN_RANKED]
    constant = [c for c in columns if c not in sparse and table[c].dropna().nunique() < 2]
    parts = [f"only {int(scored[c])} configuration(s) scored on {c}" for c in sparse]
    if constant:
        parts.append("all configurations score the same on " + ", ".join(constant) + ", so no rank order there")
    for a, b in missing:
        if {a, b} & {*sparse, *constant}:
            continue
        both = table[[a, b]].dropna()
        if len(both) < MIN_RANKED:
            parts.append(f"only {len(both)} configuration(s) scored on both {a} and {b}")
        else:
            parts.append(f"the {len(both)} configurations scored on both {a} and {b} score the same on one of them")
    return "; ".join(parts)


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


def _dimension_rows(
    label: dict, counts_by_dimension: Mapping[str, Mapping[str, int]], extra: dict | None = None
) -> list:
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
    tables = {key: cells(table) for key, table in outcomes.items()}
    rows = []
    for a, b in itertools.combinations(strategies, 2):
        counts_by_dimension, models = {}, set()
        for dimension, keys in dimensions.items():
            counts = dict.fromkeys(OUTCOMES, 0)
            for key in keys:
                table = tables.get(key)
                if table is None:
                    continue
                for model, configs in by_model.items():
                    value = table.get(configs.get(a), configs.get(b))
                    if value in counts:
                        counts[value] += 1
                        models.add(model)
            counts_by_dimension[dimension] = counts
        rows += _dimension_rows({"strategy_a": a, "strategy_b": b}, counts_by_dimension, {"models": len(models)})
    columns = [
        "strategy_a",
        "strategy_b",
        "dimension",
        "pairs",
        *OUTCOMES,
        *(f"n_{o}" for o in OUTCOMES),
        "study_almost_equal",
        "n_study_almost_equal",
        "models",
    ]
    return pd.DataFrame(rows, columns=columns)


def rq3_dense_vs_moe(
    outcomes: Mapping[str, pd.DataFrame], runs: pd.DataFrame, dimensions: Mapping[str, Sequence[str]]
) -> tuple[pd.DataFrame, str | None]:
    """Outcomes of MoE vs dense models of the same family under the same strategy, per dimension.

    Returns the table and, when no family has both architectures, the reason it is empty.
    """
    prompted = _prompted(runs)
    tables = {key: cells(table) for key, table in outcomes.items()}
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
                table = tables.get(key)
                for m, d in pairs:
                    value = table.get(m, d) if table is not None else None
                    if value in counts:
                        counts[value] += 1
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
    return (
        pd.DataFrame(),
        f"needs more models: no family has both a dense and a MoE model (families: {found or 'none'})",
    )


def size_series(runs: pd.DataFrame) -> dict[str, list[str]]:
    """Model series for the size analysis: the ``size_series`` param/tag, else dense families at 2+ sizes."""
    prompted = _prompted(runs).dropna(subset=["params_total_b"])
    out = {}
    tagged = prompted.dropna(subset=["size_series"])
    for name, group in tagged.groupby("size_series"):
        if group["params_total_b"].nunique() >= 2:
            out[str(name)] = sorted(
                set(group["model"]), key=lambda m: group[group["model"] == m]["params_total_b"].iloc[0]
            )
    if out:
        return out
    dense = prompted[prompted["architecture"] == "dense"]
    for family, group in dense.groupby("family"):
        if group["params_total_b"].nunique() >= 2:
            out[str(family)] = sorted(
                set(group["model"]), key=lambda m: group[group["model"] == m]["params_total_b"].iloc[0]
            )
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
                curve_rows.append(
                    {
                        "series": name,
                        "model": model,
                        "params_total_b": size,
                        "dataset": dataset,
                        "f1": float(values.mean()),
                        "strategies": int(values.size),
                    }
                )
            if points:
                sizes, scores = zip(*points)
                rho, p, n = spearman(sizes, scores)
                trend_rows.append({"series": name, "dataset": dataset, "sizes": n, "rho": rho, "p_value": p})
    curve_columns = ["series", "model", "params_total_b", "dataset", "f1", "strategies"]
    trend_columns = ["series", "dataset", "sizes", "rho", "p_value"]
    return pd.DataFrame(curve_rows, columns=curve_columns), pd.DataFrame(trend_rows, columns=trend_columns)


def error_breakdown(scores: pd.DataFrame) -> pd.DataFrame:
    """Missing, spurious and boundary errors per dataset, summed over configurations, with shares."""
    columns = [f"errors.{e}" for e in ERROR_TYPES]
    present = scores.dropna(subset=[c for c in columns if c in scores.columns])
    if present.empty or not all(c in scores.columns for c in columns):
        return pd.DataFrame(columns=["dataset", "configs", *ERROR_TYPES])
    present = present.assign(dataset_key=present["task"] + "/" + present["dataset"])
    table = present.groupby("dataset_key")[columns].sum()
    table = table.loc[ordered_keys(table.index)]
    table.columns = list(ERROR_TYPES)
    total = table.sum(axis=1)
    for name in ERROR_TYPES:
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
