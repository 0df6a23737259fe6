"""Robustness per instance: flip rate, drop rate and worst-case F1 against direct computations and a
brute-force document bootstrap written here."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from src.report.results import DatasetStats
from src.report.robustness import instance_f1, robustness_metrics, robustness_table
from tests.helpers.analysis_settings import ROBUSTNESS


def _set(dataset: str, ids: list[str], stats: dict[str, np.ndarray]) -> DatasetStats:
    return DatasetStats("timex", dataset, list(stats), {c: list(ids) for c in stats}, stats)


def study(seed: int = 0, documents: int = 25):
    rng = np.random.default_rng(seed)
    ids = [f"d{d}#s{s}" for d in range(documents) for s in range(int(rng.integers(1, 6)))]
    n = len(ids)
    gold = rng.integers(1, 4, n).astype(float)

    def system(skill: float) -> np.ndarray:
        pred = rng.integers(0, 4, n).astype(float)
        matched = np.minimum(pred, gold) * rng.uniform(skill, 1.0, n)
        return np.column_stack([matched, pred, gold])

    base = {"A": system(0.6), "B": system(0.2)}
    adv = {c: s * np.column_stack([rng.uniform(0, 1, len(ids)), np.ones(n), np.ones(n)]) for c, s in base.items()}
    voc = {c: s * np.column_stack([rng.uniform(0.5, 1, len(ids)), np.ones(n), np.ones(n)]) for c, s in base.items()}
    datasets = {
        "timex/base": _set("base", ids, base),
        "timex/adv": _set("adv", ids[::-1], {c: s[::-1] for c, s in adv.items()}),  # another order: matched by id
        "timex/voc": _set("voc", ids, voc),
    }
    return ids, base, adv, voc, datasets


def direct(base: np.ndarray, shifted: list[np.ndarray], threshold: float) -> dict[str, float]:
    """Each metric by a plain loop over instances."""
    flips, worst_rows = 0, []
    for n in range(len(base)):
        f1 = lambda row: 1.0 if row[1] + row[2] == 0 else 2 * row[0] / (row[1] + row[2])  # noqa: E731
        versions = [base[n], *(s[n] for s in shifted)]
        scores = [f1(v) for v in versions]
        flips += (scores[0] - min(scores[1:])) > threshold
        worst_rows.append(versions[int(np.argmin(scores))])
    micro = lambda rows: 2 * sum(r[0] for r in rows) / sum(r[1] + r[2] for r in rows)  # noqa: E731
    f1_base = micro(list(base))
    shifted_rows = [min((s[n] for s in shifted), key=lambda r: 2 * r[0] / (r[1] + r[2])) for n in range(len(base))]
    f1_shift = micro(shifted_rows)
    return {
        "flip_rate": flips / len(base),
        "drop_rate": (f1_base - f1_shift) / f1_base,
        "worst_f1": micro(worst_rows),
    }


def test_metrics_match_a_direct_computation():
    ids, base, adv, voc, datasets = study()
    table = robustness_table(datasets, resamples=200, seed=0, threshold=0.3, alpha=ROBUSTNESS["alpha"])
    assert set(zip(table["shift"], table["configuration"])) == {
        (s, c) for s in ("adv", "voc", "all") for c in ("A", "B")
    }
    for config in ("A", "B"):
        for shift, versions in (("adv", [adv[config]]), ("voc", [voc[config]]), ("all", [adv[config], voc[config]])):
            row = table[(table["shift"] == shift) & (table["configuration"] == config)].iloc[0]
            expected = direct(base[config], versions, 0.3)
            for metric, value in expected.items():
                assert row[metric] == pytest.approx(value, rel=1e-5), (config, shift, metric)  # 6 digits kept
                assert row[f"{metric}_ci_low"] <= row[metric] + 1e-9 <= row[f"{metric}_ci_high"] + 2e-9
            assert row["units"] == 25 and row["instances"] == len(ids)


def test_flip_rate_interval_agrees_with_a_brute_force_document_bootstrap():
    ids, base, adv, _, datasets = study(seed=4, documents=40)
    table = robustness_table(
        {k: datasets[k] for k in ("timex/base", "timex/adv")}, 4000, seed=1, threshold=0.3, alpha=ROBUSTNESS["alpha"]
    )
    row = table[table["configuration"] == "A"].iloc[0]
    f1_base, f1_adv = instance_f1(base["A"]), instance_f1(adv["A"])
    flips = (f1_base - f1_adv) > 0.3
    documents = sorted({i.split("#s")[0] for i in ids})
    members = {d: [n for n, i in enumerate(ids) if i.split("#s")[0] == d] for d in documents}
    rng = np.random.default_rng(99)
    rates = []
    for _ in range(4000):
        rows = [n for d in rng.choice(documents, len(documents)) for n in members[d]]
        rates.append(flips[rows].mean())
    low, high = np.quantile(rates, [0.025, 0.975])
    width = high - low
    assert abs(row["flip_rate_ci_low"] - low) < 0.1 * width and abs(row["flip_rate_ci_high"] - high) < 0.1 * width


def test_sets_without_shared_ids_give_no_rows_and_metric_names_are_mlflow_safe():
    _, base, _, _, datasets = study()
    other = _set("adv", [f"x{n}" for n in range(len(base["A"]))], {"A+D+I": base["A"]})
    table = robustness_table({"timex/base": datasets["timex/base"], "timex/adv": other}, 100, 0, **ROBUSTNESS)
    assert table.empty
    table = robustness_table({k: datasets[k] for k in ("timex/base", "timex/adv")}, 100, 0, **ROBUSTNESS)
    names = robustness_metrics(table.assign(configuration="m-A+D+I"))
    assert names and all("+" not in name for name in names)
    assert "robustness.timex.adv.m-A_D_I.flip_rate" in names


def test_rq2_mean_rho_interval_agrees_with_a_brute_force_document_bootstrap():
    from scipy.stats import spearmanr

    from src.report.uncertainty import rq2_intervals

    rng = np.random.default_rng(6)
    ids = [f"d{d}#s{s}" for d in range(15) for s in range(3)]
    configs = ["a", "b", "c", "d", "e"]
    skill = {"a": 0.3, "b": 0.4, "c": 0.45, "d": 0.5, "e": 0.6}
    datasets = {}
    for key in ("timex/base", "timex/t2c", "timex/len"):
        stats = {}
        for c in configs:
            gold = rng.integers(1, 4, len(ids)).astype(float)
            matched = gold * np.clip(rng.normal(skill[c], 0.25, len(ids)), 0, 1)
            stats[c] = np.column_stack([matched, gold, gold])
        datasets[key] = DatasetStats("timex", key.split("/")[1], configs, {c: ids for c in configs}, stats)
    f1 = pd.DataFrame(
        {k: [instance_f1(d.stats[c].sum(0)) for c in configs] for k, d in datasets.items()}, index=configs
    )
    low, high = rq2_intervals(datasets, f1, {"all": configs}, 2000, 0)["all"]
    members = {d: [n for n, i in enumerate(ids) if i.startswith(f"d{d}#")] for d in range(15)}
    means = []
    for _ in range(2000):
        table = []
        for key in datasets:
            rows = [n for d in rng.integers(0, 15, 15) for n in members[int(d)]]
            table.append([instance_f1(datasets[key].stats[c][rows].sum(0)) for c in configs])
        rhos = [spearmanr(table[a], table[b]).statistic for a, b in ((0, 1), (0, 2), (1, 2))]
        means.append(np.nanmean(rhos))
    expected = np.quantile(means, [0.025, 0.975])
    width = expected[1] - expected[0]
    assert abs(low - expected[0]) < 0.12 * width + 0.02 and abs(high - expected[1]) < 0.12 * width + 0.02
