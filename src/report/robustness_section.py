"""The report's robustness and power sections: configurations compared instance by instance on the
derived sets (:mod:`src.report.robustness`), and what each comparison family could detect
(:mod:`src.report.uncertainty`). Links go to the side-by-side view (:func:`src.report.browser.compare_link`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from src.report.browser import compare_link
from src.report.robustness import ALL_SHIFTS
from src.report.tables import fmt, markdown_table

if TYPE_CHECKING:
    from src.report.sections import Page

LABELS = {"flip_rate": "flip rate", "drop_rate": "drop rate", "worst_f1": "worst-case F1"}


def _cell(row: pd.Series, metric: str) -> str:
    value, low, high = row[metric], row[f"{metric}_ci_low"], row[f"{metric}_ci_high"]
    if pd.isna(value):
        return "–"
    return fmt(value) + ("" if pd.isna(low) or pd.isna(high) else f" [{fmt(low)}, {fmt(high)}]")


def robustness_display(table: pd.DataFrame, link=None) -> pd.DataFrame:
    """The report's robustness table: one row per (task, shift, configuration), cells ``value [low, high]``,
    the configuration linked to its base-vs-shift view where ``link`` finds one."""
    rows = []
    for _, row in table.iterrows():
        href = (
            link(row["task"], "base", row["configuration"], shift=row["shift"])
            if link and row["shift"] != ALL_SHIFTS
            else None
        )
        name = f"[{row['configuration']}]({href})" if href else str(row["configuration"])
        rows.append(
            {
                "task/shift": f"{row['task']}/{row['shift']}",
                "configuration": name,
                "instances": int(row["instances"]),
                "documents": int(row["units"]),
                "F1 base": fmt(row["f1_base"]),
                "F1 shifted": fmt(row["f1_shifted"]),
                **{LABELS[m]: _cell(row, m) for m in LABELS},
            }
        )
    return pd.DataFrame(rows)


def robustness_sentences(table: pd.DataFrame) -> list[str]:
    """Per (task, shift) with two or more configurations: the lowest and highest flip rate, and whether
    their intervals overlap (separated intervals are a difference; overlapping ones are not a tie)."""
    lines = []
    for (task, shift), part in table.groupby(["task", "shift"], sort=False):
        part = part.dropna(subset=["flip_rate"])
        if len(part) < 2:
            continue
        low = part.loc[part["flip_rate"].idxmin()]
        high = part.loc[part["flip_rate"].idxmax()]
        apart = low["flip_rate_ci_high"] < high["flip_rate_ci_low"]
        lines.append(
            f"- **{task}/{shift}**: the lowest flip rate is {low['configuration']} ({fmt(low['flip_rate'])}), the "
            f"highest {high['configuration']} ({fmt(high['flip_rate'])}); "
            + (
                "their 95% intervals do not overlap."
                if apart
                else "their 95% intervals overlap, so these two are not separated (which is not the same as equal)."
            )
        )
    return lines


def robustness_section(page: Page) -> list[str]:
    analysis = page.analysis
    table = analysis.robustness
    settings = analysis.settings
    lines = ["## Robustness instance by instance", ""]
    if table.empty:
        return lines + [
            "No configuration was scored on a base set and a derived set holding its instances (adv, adv_p, voc).",
            "",
        ]
    lines += [
        f"On the derived sets that keep their base instances' ids: *flip rate*, the share of instances whose LCS F1 "
        f"drops by more than {settings.flip_threshold} from base to the perturbed version; *drop rate* "
        "(PromptBench), (F1 base - F1 shifted) / F1 base; *worst-case F1* (HELM), micro F1 over each instance's "
        f"worse version. Shift `{ALL_SHIFTS}` takes the worst over base and every derived set. 95% intervals "
        f"resample {'whole documents' if settings.unit == 'document' else 'instances'}; "
        "`tables/robustness.csv`. A configuration links to its base-vs-shift view.",
        "",
    ]
    lines += robustness_sentences(table) + [""]
    link = compare_link(page.out)
    lines += [markdown_table(robustness_display(table, link), index=False), ""]
    return lines


def power_section(page: Page) -> list[str]:
    """Per family and dataset, the minimum detectable difference, with the underpowered ones named."""
    analysis = page.analysis
    power = analysis.power
    lines = ["## Power", ""]
    if power.empty:
        return lines + ["No paired comparison, so no minimum detectable difference.", ""]
    margin = analysis.settings.margin
    under = power[power["mdd"] > margin]
    lines += [
        f"Minimum detectable difference (MDD) at {analysis.settings.power:.0%} power and alpha = {analysis.alpha} "
        f"per family and dataset (median over its pairs). {len(under)} of {len(power)} are above the equivalence "
        f"margin {margin}: there the study can neither reliably detect a difference of that size nor show "
        "equivalence at it.",
        "",
        markdown_table(power.rename(columns={"units": "resampled units"}), index=False),
        "",
    ]
    return lines
