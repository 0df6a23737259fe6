"""The analysis's headline numbers as JSON (``reports/analysis.json``, DVC metrics).

Verdict counts per dataset and family with the study's reading beside them, the minimum
detectable differences, the clustered/instance interval-width ratios, the robustness table,
RQ1-RQ3 and each configuration's provenance; NaN becomes null.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from src.report import comparisons, rq
from src.report.analysis import Analysis, finetuned_pairs
from src.report.robustness import METRICS as ROBUSTNESS_METRICS
from src.scoring.metrics import ERROR_TYPES
from src.scoring.verdicts import EQUIVALENT, INCONCLUSIVE, VERDICTS


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    if value is pd.NA:
        return None
    if hasattr(value, "item"):
        return _clean(value.item())
    return value


def _outcome_block(row: dict) -> dict:
    return {"pairs": int(row["pairs"]), **{o: row[o] for o in (*VERDICTS, "study_almost_equal")}}


def _family_summary(analysis: Analysis, family: comparisons.ComparisonFamily) -> dict:
    out = {}
    for key, test in family.tests.items():
        entry = {
            "pairs": test.pairs,
            "comparisons": [{"instances": n, "pairs": pairs} for n, pairs in test.instance_counts()],
        }
        for c in analysis.corrections:
            table = family.outcomes[c][key].to_numpy()
            upper = table[np.triu_indices(len(test.configs), 1)]
            entry[f"significant_{c}"] = int((table == "better").sum())
            entry[f"verdicts_{c}"] = {
                "different": int(np.isin(upper, ["better", "worse"]).sum()),
                EQUIVALENT: int((upper == EQUIVALENT).sum()),
                INCONCLUSIVE: int((upper == INCONCLUSIVE).sum()),
            }
        entry["mdd"] = test.mdd(analysis.alpha, analysis.settings.power)
        out[key] = entry
    return out


def _width_summary(analysis: Analysis) -> dict:
    ratios = analysis.widths.attrs.get("ratios") if not analysis.widths.empty else None
    if ratios is None or ratios.empty:
        return {}
    return {
        row.dataset: {"documents": row.documents, "instances": row.instances, "ratio": row.ratio}
        for row in ratios.itertuples(index=False)
    }


def _power_summary(analysis: Analysis) -> dict:
    out: dict[str, dict] = {}
    for row in analysis.power.itertuples(index=False):
        out.setdefault(row.family, {})[row.dataset] = {"pairs": row.pairs, "units": row.units, "mdd": row.mdd}
    return out


def robustness_summary(table: pd.DataFrame) -> dict:
    """``{task/shift: {configuration: {metric: value, metric_ci95: [low, high]}}}`` of the robustness table."""
    out: dict[str, dict] = {}
    for row in table.to_dict("records"):
        entry = {"instances": row["instances"], "documents": row["units"]}
        for metric in ROBUSTNESS_METRICS:
            entry[metric] = row[metric]
            entry[f"{metric}_ci95"] = [row[f"{metric}_ci_low"], row[f"{metric}_ci_high"]]
        out.setdefault(f"{row['task']}/{row['shift']}", {})[row["configuration"]] = entry
    return out


def analysis_summary(analysis: Analysis) -> dict:
    """The headline numbers as JSON (DVC metrics), with each configuration's provenance (key, code and
    data version; its run id, commit and usage are history: :func:`src.report.prose.history_page`);
    NaN becomes null."""
    results = analysis.results
    rq1 = {}
    for row in analysis.rq1.itertuples(index=False):
        block = rq1.setdefault(row.correction, {}).setdefault(row.group, {})
        block[row.target if row.target == "all" else f"{row.reference}->{row.target}"] = _outcome_block(row._asdict())
    rq2 = {}
    for group, corr in analysis.rq2.items():
        rq2[group] = {
            "configs": len(corr.configs),
            "mean_rho": rq.mean_off_diagonal(corr.rho),
            "mean_rho_ci95": list(analysis.rq2_intervals.get(group, (None, None))),
            "reason": corr.reason,
        }
    pairs = analysis.strategy_pairs
    strategy = {}
    for row in pairs[pairs["dimension"] == "all"].itertuples(index=False):
        strategy.setdefault(row.correction, {})[f"{row.strategy_a} vs {row.strategy_b}"] = _outcome_block(row._asdict())
    moe = {}
    if not analysis.dense_vs_moe.empty:
        for row in analysis.dense_vs_moe[analysis.dense_vs_moe["dimension"] == "all"].itertuples(index=False):
            moe.setdefault(row.correction, {})[row.family] = _outcome_block(row._asdict())
    errors = {
        row.dataset: {n: getattr(row, f"share_{n}") for n in ERROR_TYPES}
        for row in analysis.errors.itertuples(index=False)
    }
    finetuned = _family_summary(analysis, analysis.finetuned)
    c = analysis.correction
    for row in finetuned_pairs(analysis).itertuples(index=False):
        finetuned[row.dataset].setdefault("tests", []).append(
            {
                "a": row.config_a,
                "b": row.config_b,
                "instances": row.instances,
                "f1_a": row.f1_a,
                "f1_b": row.f1_b,
                "delta": row.delta,
                "p_a_better": row.p_a_better,
                "p_b_better": row.p_b_better,
                "p_equivalent": row.p_equivalent,
                "outcome": row.outcome,
                f"outcome_{c}": getattr(row, f"outcome_{c}"),
                "study_outcome": row.study_outcome,
            }
        )
    provenance = {
        config: {
            "summary": row.summary,
            "key": row.key,
            "code_version": row.code_version,
            "data_version": row.data_version,
        }
        for config, row in zip(analysis.provenance.index, analysis.provenance.itertuples(index=False))
    }
    return _clean(
        {
            "experiment": results.experiment_name,
            "configurations": len(results.runs),
            "prompted": len(analysis.groups["all"]),
            "finetuned": len(analysis.finetuned.configs),
            "datasets": list(analysis.tests),
            "resamples": analysis.resamples,
            "seed": analysis.seed,
            "alpha": analysis.alpha,
            "correction": analysis.correction,
            "equivalence_margin": analysis.settings.margin,
            "resample_unit": analysis.settings.unit,
            "power": analysis.settings.power,
            "flip_threshold": analysis.settings.flip_threshold,
            "interval_width_ratio": _width_summary(analysis),
            "mdd": _power_summary(analysis),
            "robustness": robustness_summary(analysis.robustness),
            "significant_pairs": _family_summary(analysis, analysis.prompted),
            "finetuned_pairs": finetuned,
            "rq1": rq1,
            "rq2": rq2,
            "rq3": {
                "strategy_pairs": strategy,
                "dense_vs_moe": moe or analysis.dense_vs_moe_reason,
                "size_series": analysis.series,
            },
            "errors": errors,
            "provenance": provenance,
        }
    )
