"""Sample size from a pilot's evidence, checked by simulating studies of the size it asks for."""

from __future__ import annotations

import numpy as np
import pytest

from src.planning.power import instances_needed, power_beside_cost, power_rows
from src.scoring.calibrated import permutation_p
from src.scoring.clustered import resampling_units
from src.tracking.evidence import write_evidence

K = 4  # gold = predicted spans per sentence: F1 is the mean match share


def simulated_study(rng, documents: int, shift: float):
    """Sentences of ``documents`` documents; each document has a level both systems share; B = A - shift."""
    ids, a_rows, b_rows = [], [], []
    for d in range(documents):
        level = rng.uniform(0.35, 0.6)
        for s in range(int(rng.integers(1, 8))):
            ids.append(f"doc{d}#s{s}")
            a_rows.append((rng.binomial(K, level + shift), K, K))
            b_rows.append((rng.binomial(K, level), K, K))
    return ids, np.array(a_rows, dtype=float), np.array(b_rows, dtype=float)


def pilot(tmp_path, rng, documents: int = 40):
    ids, a, b = simulated_study(rng, documents, 0.0)
    for name, stats in (("m-I", a), ("m-D", b)):
        artifact = {"ids": ids, "stats": {"lcs": stats.tolist()}}
        write_evidence(tmp_path / "runs" / name, {"run_name": name, "key": name}, {}, {("timex", "base"): artifact})
    return tmp_path / "runs"


def test_a_study_of_the_size_asked_for_detects_delta_with_the_asked_power(tmp_path):
    rng = np.random.default_rng(8)
    delta = 0.06
    # a large pilot: the test checks the formula, not a small pilot's own sampling error
    table = instances_needed(pilot(tmp_path, rng, documents=500), delta, alpha=0.05, power=0.8, seed=1)
    row = table.iloc[0]
    assert row["dataset"] == "timex/base" and row["pilot_configurations"] == 2
    assert row["basis"] == "2 paired configurations"
    documents = int(row["documents_needed"])
    assert 5 < documents < 400
    rejected, trials = 0, 200
    for trial in range(trials):
        ids, a, b = simulated_study(rng, documents, delta)
        units = resampling_units(np.stack([a, b]), ids)
        rejected += permutation_p(units[0], units[1], permutations=400, seed=trial) < 0.05  # the verdicts' test
    assert 0.8 - 0.12 < rejected / trials < 0.8 + 0.12


def test_one_configuration_pilot_and_power_rows(tmp_path):
    rng = np.random.default_rng(3)
    ids, a, _ = simulated_study(rng, 20, 0.0)
    write_evidence(
        tmp_path / "one",
        {"run_name": "solo", "key": "solo"},
        {},
        {("timex", "base"): {"ids": ids, "stats": {"lcs": a.tolist()}}},
    )
    table = instances_needed(tmp_path / "one", 0.05)
    assert table.iloc[0]["basis"].startswith("one configuration")
    plans = [
        {
            "prompt_cost_usd": 2.0,
            "output_ceiling_cost_usd": 6.0,
            "datasets": {
                "timex/base": {"requests": 10, "prompt_token_bound": 300, "output_token_ceiling": 100},
                "timex/t2c": {"requests": 10, "prompt_token_bound": 100, "output_token_ceiling": 300},
            },
        }
    ]
    lines = power_rows(table, plans)
    assert lines[1].startswith("  timex/base: ") and "cost at most $3.00" in lines[1]  # 2 * 3/4 + 6 * 1/4
    assert "no pilot evidence" in lines[2] and "cost at most $5.00" in lines[2]  # 2 * 1/4 + 6 * 3/4
    with pytest.raises(ValueError):
        instances_needed(tmp_path / "one", 0.0)


def test_power_beside_cost_reads_the_pilot_and_says_when_there_is_none(tmp_path):
    rng = np.random.default_rng(5)
    folder = pilot(tmp_path, rng, documents=30)
    plans = [{"prompt_cost_usd": None, "output_ceiling_cost_usd": None, "datasets": {"timex/base": {"requests": 40}}}]
    lines = power_beside_cost(plans, [folder])
    assert "to detect a difference of 0.02 F1 (analysis.margin) at alpha 0.05 with power 0.8" in lines[0]
    needed = instances_needed(folder, 0.02, seed=13)
    assert lines[1] == (
        f"  timex/base: {needed.iloc[0]['instances_needed']:,} instances ({needed.iloc[0]['documents_needed']:,} "
        f"documents) needed; pilot: {needed.iloc[0]['pilot_instances']} instances, MDD "
        f"{needed.iloc[0]['pilot_mdd']:.3f} (2 paired configurations); 40 requests planned, cost at most price unknown"
    )
    assert power_beside_cost(plans, [tmp_path / "nothing"])[0].startswith("power: no pilot evidence under ")


def test_a_one_document_pilot_asks_for_nothing_and_no_plan_goes_below_the_minimum(tmp_path):
    """Issue 47: a one-document pilot had MDD 0 and said one document was enough."""
    rng = np.random.default_rng(5)
    ids, a, b = simulated_study(rng, 1, 0.0)
    for name, stats in (("m-I", a), ("m-D", b)):
        artifact = {"ids": ids, "stats": {"lcs": stats.tolist()}}
        write_evidence(tmp_path / "one" / name, {"run_name": name, "key": name}, {}, {("timex", "base"): artifact})
    row = instances_needed(tmp_path / "one", 0.3).iloc[0]
    assert row["documents_needed"] is None and row["pilot_mdd"] is None
    assert row["basis"] == "pilot too small: 1 document(s), a verdict needs at least 6"
    assert power_rows(instances_needed(tmp_path / "one", 0.3), [])[1] == f"  timex/base: {row['basis']}; not planned"
    big = instances_needed(pilot(tmp_path, rng, documents=40), 0.9).iloc[0]  # a huge delta: the formula says 1
    assert big["documents_needed"] == 6
