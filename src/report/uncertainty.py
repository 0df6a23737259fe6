"""How certain the analysis can be: F1 intervals by resampling unit, and what each comparison could detect.

* :func:`interval_widths`: every configuration's 95% F1 interval with documents resampled (the
  analysis's unit) and with instances resampled (the study's bootstrap), and per dataset the
  median ratio of their widths (the report's Methods states it);
* :func:`power_table`: per comparison family and dataset, the median minimum detectable difference
  (MDD) of the calibrated tests (:mod:`src.scoring.calibrated`: t quantiles times the jackknife
  standard error, none below the minimum documents).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from src.report.comparisons import dataset_seed
from src.rounding import rounded
from src.scoring.clustered import DOCUMENT, INSTANCE, RESAMPLE_UNITS, resampling_units
from src.scoring.stats import bootstrap_f1_matrix, percentile_interval, resample_counts

#: Resamples of RQ2's mean-rho interval at most: each ranks every configuration on every dataset, and the
#: 2.5% and 97.5% quantiles of a mean are steady by then (Monte-Carlo error ~0.005 rho).
RQ2_RESAMPLES = 2000

INTERVAL_COLUMNS = ["configuration", "dataset", "unit", "units", "f1_ci_low", "f1_ci_high"]
WIDTH_COLUMNS = ["dataset", "configurations", "instances", "documents", "width_instance", "width_document", "ratio"]
POWER_COLUMNS = ["family", "dataset", "pairs", "units", "median_delta_sd", "mdd"]


def config_intervals(datasets: Mapping[str, object], resamples: int, seed: int) -> pd.DataFrame:
    """Each configuration's 95% F1 interval on each dataset, once per resampling unit (rounded by
    :func:`src.rounding.rounded`: a matrix product's last bits differ from one CPU to another).

    Configurations scored on the same instances share one draw per unit (seeded by
    :func:`src.report.comparisons.dataset_seed`), so the intervals are reproducible and cheap.
    """
    rows = []
    for key, data in datasets.items():
        for _, members in data.instance_groups():
            ids = list(data.ids[members[0]])
            stats = data.stacked(members, ids)
            for unit in RESAMPLE_UNITS:
                units = resampling_units(stats, ids, unit)
                counts = resample_counts(units.shape[1], resamples, dataset_seed(seed, f"{key}|{unit}", ids))
                ci = percentile_interval(bootstrap_f1_matrix(units, counts))
                rows += [
                    {
                        "configuration": config,
                        "dataset": key,
                        "unit": unit,
                        "units": units.shape[1],
                        "f1_ci_low": rounded(float(low)),
                        "f1_ci_high": rounded(float(high)),
                    }
                    for config, (low, high) in zip(members, ci)
                ]
    return pd.DataFrame(rows, columns=INTERVAL_COLUMNS)


def width_ratios(intervals: pd.DataFrame) -> pd.DataFrame:
    """Per dataset: median interval width per unit and the median per-configuration ratio document / instance."""
    if intervals.empty:
        return pd.DataFrame(columns=WIDTH_COLUMNS)
    frame = intervals.assign(width=intervals["f1_ci_high"] - intervals["f1_ci_low"])
    wide = frame.pivot_table(index=["dataset", "configuration"], columns="unit", values=["width", "units"])
    rows = []
    for key, part in wide.groupby(level="dataset", sort=False):
        doc, inst = part["width"][DOCUMENT], part["width"][INSTANCE]
        ratio = (doc / inst.where(inst > 0)).dropna()
        rows.append(
            {
                "dataset": key,
                "configurations": len(part),
                "instances": int(part["units"][INSTANCE].max()),
                "documents": int(part["units"][DOCUMENT].max()),
                "width_instance": float(inst.median()),
                "width_document": float(doc.median()),
                "ratio": rounded(float(ratio.median())) if not ratio.empty else float("nan"),
            }
        )
    order = list(dict.fromkeys(intervals["dataset"]))
    return pd.DataFrame(rows, columns=WIDTH_COLUMNS).set_index("dataset").loc[order].reset_index()


def interval_widths(datasets: Mapping[str, object], resamples: int, seed: int) -> pd.DataFrame:
    """:func:`config_intervals` of every dataset, with the per-dataset ratios in ``attrs["ratios"]``."""
    intervals = config_intervals(datasets, resamples, seed)
    intervals.attrs["ratios"] = width_ratios(intervals)
    return intervals


def power_table(families: Sequence[object], alpha: float, power: float) -> pd.DataFrame:
    """Per family and dataset: tested pairs, median resampling units, median jackknife standard error of
    the delta (``median_delta_sd``) and the median MDD."""
    rows = []
    for family in families:
        for key, test in family.tests.items():
            upper_i, upper_j = np.triu_indices(len(test.configs), 1)
            keep = test.tested[upper_i, upper_j]
            if not keep.any() or test.delta_sd is None:
                continue
            sd = test.delta_sd[upper_i[keep], upper_j[keep]]
            matrix = test.units if test.units is not None else test.instances
            units = matrix[upper_i[keep], upper_j[keep]]
            rows.append(
                {
                    "family": family.name,
                    "dataset": key,
                    "pairs": int(keep.sum()),
                    "units": int(np.median(units)),
                    "median_delta_sd": rounded(float(np.median(sd))),
                    "mdd": rounded(test.mdd(alpha, power)),
                }
            )
    return pd.DataFrame(rows, columns=POWER_COLUMNS)


def family_mdd(table: pd.DataFrame, family: str, keys: Sequence[str] | None = None) -> float:
    """The median MDD of a family over ``keys`` (all its datasets when None); NaN when none."""
    part = table[table["family"] == family] if not table.empty else table
    if keys is not None and not part.empty:
        part = part[part["dataset"].isin(list(keys))]
    return float(part["mdd"].median()) if not part.empty else float("nan")


def resampled_f1(
    datasets: Mapping[str, object], configs: Sequence[str], keys: Sequence[str], resamples: int, seed: int
) -> np.ndarray:
    """(R, configs, keys) F1 with whole documents resampled on each dataset (NaN where not scored)."""
    out = np.full((resamples, len(configs), len(keys)), np.nan)
    where = {c: n for n, c in enumerate(configs)}
    for d, key in enumerate(keys):
        data = datasets[key]
        for _, members in data.instance_groups():
            members = [m for m in members if m in where]
            if not members:
                continue
            ids = list(data.ids[members[0]])
            units = resampling_units(data.stacked(members, ids), ids, DOCUMENT)
            counts = resample_counts(units.shape[1], resamples, dataset_seed(seed, f"{key}|rq2", ids))
            out[:, [where[m] for m in members], d] = bootstrap_f1_matrix(units, counts).T
    return out


def mean_rho_interval(boot: np.ndarray) -> tuple[float, float]:
    """95% interval of RQ2's mean Spearman rho between datasets from resampled F1 (R, configs, datasets).

    Uses the configurations scored on every dataset (NaN interval under 3 of them or 2 datasets); in each
    resample the configurations are ranked per dataset and the ranks correlated (Spearman).
    """
    boot = np.asarray(boot, dtype=np.float64)
    if boot.ndim != 3 or boot.shape[2] < 2 or boot.shape[0] == 0:
        return float("nan"), float("nan")
    complete = ~np.isnan(boot).any(axis=(0, 2))
    if complete.sum() < 3:
        return float("nan"), float("nan")
    ranks = rankdata(boot[:, complete, :], axis=1)
    centred = ranks - ranks.mean(axis=1, keepdims=True)
    scale = np.sqrt((centred**2).sum(axis=1))  # (R, D); 0 where a dataset ranks every configuration alike
    upper_i, upper_j = np.triu_indices(boot.shape[2], 1)
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # a resample without any defined rho: NaN, left out
        rho = np.einsum("rsd,rse->rde", centred, centred) / (scale[:, :, None] * scale[:, None, :])
        means = np.nanmean(rho[:, upper_i, upper_j], axis=1)
        means = means[~np.isnan(means)]
        if not means.size:
            return float("nan"), float("nan")
        low, high = np.quantile(means, [0.025, 0.975])
    return rounded(float(low)), rounded(float(high))


def rq2_intervals(
    datasets: Mapping[str, object],
    f1_table: pd.DataFrame,
    groups: Mapping[str, Sequence[str]],
    resamples: int,
    seed: int,
) -> dict[str, tuple[float, float]]:
    """Per group of configurations: the 95% interval of RQ2's mean rho, documents resampled (one draw for all;
    at most :data:`RQ2_RESAMPLES` resamples)."""
    resamples = min(resamples, RQ2_RESAMPLES)
    keys = [k for k in f1_table.columns if k in datasets]
    configs = list(f1_table.index)
    boot = resampled_f1(datasets, configs, keys, resamples, seed) if keys and configs else None
    out = {}
    for group, members in groups.items():
        chosen = [n for n, c in enumerate(configs) if c in set(members)]
        out[group] = mean_rho_interval(boot[:, chosen, :]) if boot is not None else (float("nan"), float("nan"))
    return out
