"""The report's sentences about uncertainty: how a resample is drawn, how much clustering widened the
intervals, the power of the comparisons, and tested pairs with their verdicts and side-by-side links.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from src.report.comparisons import CORRECTION_NAMES
from src.report.tables import fmt
from src.scoring.clustered import INSTANCE

if TYPE_CHECKING:
    from src.report.analysis import Analysis


def resampling_lines(analysis: Analysis) -> list[str]:
    """How a resample was drawn, and per dataset how much the document clustering widened the intervals."""
    settings = analysis.settings
    if settings.unit == INSTANCE:
        lines = [
            "- Each resample draws single instances with replacement (the study's bootstrap; "
            "`analysis.resample_unit: instance`)."
        ]
    else:
        lines = [
            "- Each resample draws whole documents with replacement (an instance's document: its id before "
            "`#s<n>`; a whole-document instance is its own cluster; a derived instance keeps its base instance's "
            "id), one draw shared by every configuration compared on the same instances, so the tests stay paired. "
            "Every interval, paired test, gap and robustness statistic resamples this way "
            "(`analysis.resample_unit: instance` gives the study's instance-level bootstrap)."
        ]
    ratios = analysis.widths.attrs.get("ratios") if not analysis.widths.empty else None
    if ratios is not None and not ratios.empty:
        cells = "; ".join(
            f"{r.dataset} "
            + (f"{fmt(r.ratio, 2)}x" if r.ratio == r.ratio else "no spread to compare (every interval has width 0)")
            + f" ({r.documents} documents, {r.instances} instances)"
            for r in ratios.itertuples(index=False)
        )
        lines.append(
            "- Width of the 95% F1 interval with documents resampled over its width with instances resampled, "
            f"median over configurations, per dataset: {cells}."
        )
    mdd = analysis.power
    if not mdd.empty:
        lines.append(
            f"- Power: the minimum detectable difference (MDD) is the true F1 difference a one-sided test at alpha = "
            f"{analysis.alpha} detects with probability {settings.power}: (z(1 - alpha) + z(power)) x the standard "
            "deviation of the resampled paired difference (median over a dataset's pairs; `tables/power.csv`). "
            f"A comparison whose MDD exceeds the equivalence margin ({settings.margin}) is underpowered: it can "
            "neither detect a difference of that size reliably nor show equivalence at it."
        )
    return lines


def linked_pairs(pairs: pd.DataFrame, correction: str, link) -> pd.DataFrame:
    """Tested pairs for the report: F1s, delta, verdict (corrected) with the study's reading and TOST p,
    and a link to the side-by-side view where one exists (:func:`src.report.browser.compare_link`)."""
    rows = []
    for row in pairs.to_dict("records"):
        task, dataset = str(row["dataset"]).split("/", 1)
        href = link(task, dataset, row["config_a"], row["config_b"])
        rows.append(
            {
                "dataset": row["dataset"],
                "a": row["config_a"],
                "b": row["config_b"],
                "instances": row["instances"],
                "f1_a": row["f1_a"],
                "f1_b": row["f1_b"],
                "delta": row["delta"],
                f"verdict ({CORRECTION_NAMES.get(correction, correction)})": row[f"outcome_{correction}"],
                "study's reading": row[f"study_outcome_{correction}"],
                "p_equivalent": row[f"p_equivalent_{correction}"],
                "view": f"[side by side]({href})" if href else "–",
            }
        )
    return pd.DataFrame(rows)
