"""The ``dvc plots`` tables: every target keeps its rows, also when no pair qualifies."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from src.report import plots, rq


def _outcomes(table: dict[str, list[str]], names: list[str]) -> pd.DataFrame:
    return pd.DataFrame(table, index=names).T[names]


def _rq1(base: pd.DataFrame, target: pd.DataFrame) -> pd.DataFrame:
    table = rq.rq1_transfer(
        {"timex/base": base, "timex/adv": target}, [("timex/base", "timex/adv")], {"all": ["a", "b"]}
    )
    return table.assign(correction="none")


def test_the_rq1_plot_counts_pairs_by_outcome_and_keeps_a_target_no_pair_reached():
    names = ["a", "b"]
    undecided = _outcomes({"a": ["inconclusive", "inconclusive"], "b": ["inconclusive", "inconclusive"]}, names)
    plotted = plots.rq1_transfer(SimpleNamespace(rq1=_rq1(undecided, undecided)))
    # no pair is better on base (too few documents for a verdict): the targets stay, with 0 pairs each
    assert set(plotted["target"]) == {"timex/adv", "all"}
    assert (plotted["pairs"] == 0).all() and plotted["probability"].isna().all()
    assert len(plotted) == 2 * 4

    decided = _outcomes({"a": ["inconclusive", "better"], "b": ["worse", "inconclusive"]}, names)
    shifted = _outcomes({"a": ["inconclusive", "worse"], "b": ["better", "inconclusive"]}, names)
    plotted = plots.rq1_transfer(SimpleNamespace(rq1=_rq1(decided, shifted))).set_index("target_outcome")
    assert plotted.loc["timex/adv worse", "pairs"] == 1 and plotted.loc["timex/adv worse", "probability"] == 1.0
    assert plotted.loc["timex/adv better", "pairs"] == 0 and plotted.loc["timex/adv better", "probability"] == 0.0
    assert (plotted["tested"] == 1).all()
