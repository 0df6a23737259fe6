"""Up to five headline findings, one sentence each, every one backed by the tests behind its table.

A finding is stated only where its test exists (pairs tested, a gap cell bootstrapped): a study
without tests gets fewer findings, never a sentence about nothing. Each names the test and the
correction and links to the table holding its numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from src.report.comparisons import CORRECTION_NAMES
from src.report.uncertainty import family_mdd
from src.study import strategy_groups

if TYPE_CHECKING:
    from src.report.analysis import Analysis

MAX_FINDINGS = 5
TEST = "calibrated paired test"


@dataclass(frozen=True)
class Finding:
    text: str
    table: str  # the table's path relative to the report


def _method(analysis: Analysis, test: str = TEST, keys=None) -> str:
    return f"{test}, {CORRECTION_NAMES.get(analysis.correction, analysis.correction)}{power_clause(analysis, keys)}"


def power_clause(analysis: Analysis, keys=None, family: str | None = None) -> str:
    """``; minimum detectable difference 0.081 ...``: the median MDD of the comparisons behind a finding,
    and when it exceeds the equivalence margin, that they are underpowered."""
    mdd = family_mdd(analysis.power, family or analysis.prompted.name, keys)
    if mdd != mdd:  # NaN: no paired comparison behind the finding
        return ""
    settings = analysis.settings
    clause = f"; minimum detectable difference {mdd:.3f} F1 at {settings.power:.0%} power"
    if mdd > settings.margin:
        clause += f", underpowered for differences of the {settings.margin} margin"
    return clause


def corrected_rows(analysis: Analysis, table: pd.DataFrame, **match: str) -> pd.DataFrame:
    """The rows of an RQ table under the analysis's correction whose columns equal ``match`` (empty if none)."""
    if table.empty:
        return table
    keep = table["correction"] == analysis.correction
    for column, value in match.items():
        keep &= table[column] == value
    return table[keep]


def best_configuration(analysis: Analysis) -> Finding | None:
    """The configuration with the highest F1 on most sets, and on how many it beats every other one."""
    outcomes = analysis.prompted.outcomes.get(analysis.correction, {})
    f1 = analysis.f1
    keys = [k for k in outcomes if k in f1.columns and f1[k].notna().sum() >= 2]
    if not keys:
        return None
    tops = {key: f1[key].idxmax() for key in keys}
    counts = pd.Series(list(tops.values())).value_counts()
    best = counts.index[0]
    wins = 0
    for key in keys:
        table = outcomes[key]
        if best in table.index:
            others = [c for c in table.columns if c != best and table.loc[best, c] != "untested"]
            wins += bool(others) and all(table.loc[best, c] == "better" for c in others)
    return Finding(
        f"{best} has the highest F1 on {int(counts.iloc[0])} of {len(keys)} sets and is significantly better than "
        f"every other prompted configuration on {wins} of them ({_method(analysis, keys=keys)}).",
        "tables/heatmap_f1.csv",
    )


def inductive_vs_not(analysis: Analysis) -> Finding | None:
    """Inductive(+) against non-inductive strategies of the same model, over every set."""
    groups = strategy_groups()
    runs = analysis.results.runs
    outcomes = analysis.prompted.outcomes.get(analysis.correction, {})
    prompted = runs.loc[[c for c in analysis.groups["all"] if c in runs.index]]
    better = worse = 0
    sets_won = sets = 0
    for table in outcomes.values():
        b = w = 0
        for _, members in prompted.groupby("model"):
            inductive = [c for c in members.index if members.loc[c, "strategy"] in groups["inductive+"]]
            other = [c for c in members.index if members.loc[c, "strategy"] in groups["non-inductive"]]
            for i in (c for c in inductive if c in table.index):
                for j in (c for c in other if c in table.columns):
                    b += table.loc[i, j] == "better"
                    w += table.loc[i, j] == "worse"
        if b or w:
            sets += 1
            sets_won += b > w
        better, worse = better + b, worse + w
    if not sets:
        return None
    verb = "beat" if sets_won * 2 >= sets else "do not beat"
    return Finding(
        f"Inductive strategies {verb} non-inductive ones of the same model on {sets_won} of {sets} sets with a "
        f"significant difference ({int(better)} significant wins, {int(worse)} losses; {_method(analysis)}).",
        "tables/rq3_strategy_pairs.csv",
    )


def carry_over(analysis: Analysis) -> Finding | None:
    """RQ1 pooled: of the pairs better on base, the share still better on the shifted sets."""
    rows = corrected_rows(analysis, analysis.rq1, group="all", target="all")
    if rows.empty or rows.iloc[0]["pairs"] == 0:
        return None
    row = rows.iloc[0]
    return Finding(
        f"Of {int(row['pairs'])} (pair, shifted set) cases significantly better on base, {100 * row['better']:.0f}% "
        f"stay significantly better on the shifted set, {100 * row['worse']:.0f}% turn worse, "
        f"{100 * row['equivalent']:.0f}% are shown equivalent and {100 * row['inconclusive']:.0f}% are inconclusive "
        f"(the study's reading: {100 * row['study_almost_equal']:.0f}% almost equal; {_method(analysis)}).",
        "tables/rq1_transfer.csv",
    )


def gap_finding(analysis: Analysis, gaps: pd.DataFrame) -> Finding | None:
    """How often F1 drops from base to a shifted set, how often significantly, and the worst dimension."""
    if gaps.empty:
        return None
    column = f"p_{analysis.correction}"
    drops = gaps[gaps["gap"] < 0]
    significant = int(((gaps["gap"] < 0) & (gaps[column] < analysis.alpha)).sum())
    by_dimension = gaps.groupby("dimension")["gap"].mean()
    worst = by_dimension.idxmin()
    return Finding(
        f"F1 drops from base to the shifted set in {len(drops)} of {len(gaps)} (configuration, set) cells, "
        f"significantly in {significant}; the largest mean change is on {worst} ({by_dimension[worst]:+.3f}) "
        f"(calibrated test of the gap, paired on shared instances, "
        f"{CORRECTION_NAMES.get(analysis.correction, analysis.correction)}"
        f"{_gap_power(analysis, gaps)}).",
        "tables/generalization_gap.csv",
    )


def _gap_power(analysis: Analysis, gaps: pd.DataFrame) -> str:
    """The gap tests' median MDD (``tables/generalization_gap.csv``: two-sided t, NaN below the minimum documents)."""
    if "mdd" not in gaps.columns or gaps["mdd"].isna().all():
        return ""
    mdd = float(gaps["mdd"].median())
    clause = f"; minimum detectable difference {mdd:.3f} F1 at {analysis.settings.power:.0%} power"
    return clause + (
        f", underpowered for differences of the {analysis.settings.margin} margin"
        if mdd > analysis.settings.margin
        else ""
    )


def strongest_pair(analysis: Analysis) -> Finding | None:
    """The strategy pair with the most one-sided significant outcomes over (model, dataset) cells."""
    rows = corrected_rows(analysis, analysis.strategy_pairs, dimension="all")
    if rows.empty:
        return None
    rows = rows[(rows["n_better"] + rows["n_worse"]) > 0]
    if rows.empty:
        return None
    margin = (rows["n_better"] - rows["n_worse"]).abs().to_numpy()
    row = rows.iloc[int(np.argmax(margin))]
    a, b = (row["strategy_a"], row["strategy_b"])
    wins, losses = int(row["n_better"]), int(row["n_worse"])
    if losses > wins:
        a, b, wins, losses = b, a, losses, wins
    return Finding(
        f"Strategy {a} beats {b} in {wins} of {int(row['pairs'])} (model, dataset) cells, loses in {losses}, is shown "
        f"equivalent in {int(row['n_equivalent'])} and inconclusive in {int(row['n_inconclusive'])} "
        f"({_method(analysis)}).",
        "tables/rq3_strategy_pairs.csv",
    )


def findings(analysis: Analysis, gaps: pd.DataFrame) -> list[Finding]:
    """The findings the tests support, in a fixed order, at most :data:`MAX_FINDINGS`."""
    found = [
        best_configuration(analysis),
        inductive_vs_not(analysis),
        carry_over(analysis),
        gap_finding(analysis, gaps),
        strongest_pair(analysis),
    ]
    return [f for f in found if f is not None][:MAX_FINDINGS]
