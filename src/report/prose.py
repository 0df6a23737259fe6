"""The report's prose: sentences and paragraphs stating computed values, section by section.

Every sentence states a number of the analysis; a section without enough input says
what it needs instead of concluding anything. :mod:`src.report.writer` assembles them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from src.billing.ledger import usd
from src.redact import redact_uris
from src.report import rq
from src.report.analysis import finetuned_pairs, history_table, instance_table
from src.report.browser import compare_link
from src.report.comparisons import CORRECTION_NAMES
from src.report.tables import fmt, markdown_table, pct
from src.report.uncertainty_prose import linked_pairs, resampling_lines
from src.scoring.calibrated import minimum_documents
from src.study import DATASETS, TASK_ORDER

if TYPE_CHECKING:
    from src.report.analysis import Analysis


def rq1_sentences(analysis: Analysis) -> list[str]:
    table, alpha, lines = analysis.rq1, analysis.alpha, []
    if table.empty:
        return ["No generalization set has a base set to pair with, so RQ1 has nothing to compare."]
    for group in dict.fromkeys(table["group"]):
        part = table[table["group"] == group]
        for c in analysis.corrections:
            rows = part[part["correction"] == c]
            pooled = rows[rows["target"] == "all"].iloc[0]
            links = rows[rows["target"] != "all"]
            name = CORRECTION_NAMES.get(c, c)
            if pooled["pairs"] == 0:
                lines.append(
                    f"- **{group}, {name}**: no ordered pair of configurations is significantly better on a "
                    f"base set at alpha = {alpha} (0 pairs over {len(links)} links), so there is nothing to follow."
                )
                continue
            sentence = (
                f"- **{group}, {name}**: over {len(links)} base-to-generalization links, "
                f"{int(pooled['pairs'])} (pair, link) cases start significantly better on base; on the "
                f"generalization set they stay better in {pct(pooled['better'])}, are shown equivalent in "
                f"{pct(pooled['equivalent'])}, inconclusive in {pct(pooled['inconclusive'])} and turn worse in "
                f"{pct(pooled['worse'])} (the study's reading calls {pct(pooled['study_almost_equal'])} "
                "almost equal: equivalent and inconclusive together)."
            )
            defined = links[links["pairs"] > 0]
            if len(defined) > 1 and defined["better"].nunique() > 1:
                top = defined.loc[defined["better"].idxmax()]
                low = defined.loc[defined["better"].idxmin()]
                sentence += (
                    f" The share staying better is highest on {top['target']} ({pct(top['better'])} of "
                    f"{int(top['pairs'])}) and lowest on {low['target']} ({pct(low['better'])} of {int(low['pairs'])})."
                )
            elif len(defined) > 1:
                sentence += f" The share staying better is {pct(defined['better'].iloc[0])} on each of the {len(defined)} links."
            lines.append(sentence)
    return lines


def rq2_sentences(analysis: Analysis) -> list[str]:
    lines = []
    for group, corr in analysis.rq2.items():
        if not corr.computed:
            lines.append(f"- **{group}** ({len(corr.configs)} configurations): no correlation computed: {corr.reason}.")
            continue
        rho = corr.rho.to_numpy(dtype=np.float64)
        upper_i, upper_j = np.triu_indices(len(rho), 1)
        values = rho[upper_i, upper_j]
        valid = ~np.isnan(values)
        best, worst = np.nanargmax(values), np.nanargmin(values)
        names = list(corr.rho.columns)
        raw = corr.p_value.to_numpy(dtype=np.float64)[upper_i, upper_j]
        adjusted = corr.p_adjusted.to_numpy(dtype=np.float64)[upper_i, upper_j]
        sentence = (
            f"- **{group}** ({len(corr.configs)} configurations): mean rho over {int(valid.sum())} dataset pairs is "
            f"{fmt(rq.mean_off_diagonal(corr.rho))}; highest {names[upper_i[best]]} vs {names[upper_j[best]]} "
            f"({fmt(values[best])}), lowest {names[upper_i[worst]]} vs {names[upper_j[worst]]} ({fmt(values[worst])}); "
            f"{int(np.sum(raw < analysis.alpha))} of {int(valid.sum())} dataset pairs have p < {analysis.alpha}, "
            f"{int(np.sum(adjusted < analysis.alpha))} after {CORRECTION_NAMES.get(analysis.correction)}."
        )
        low, high = analysis.rq2_intervals.get(group, (float("nan"), float("nan")))
        if low == low and high == high:  # not NaN
            sentence += f" With whole documents resampled, the mean rho's 95% interval is [{fmt(low)}, {fmt(high)}]."
        if corr.reason:
            sentence += f" Missing values: {corr.reason}."
        lines.append(sentence)
    return lines


def _ties(values: pd.Series, top: float) -> str:
    others = int(np.isclose(values, top).sum()) - 1
    return f"; {others} other comparison(s) share that value" if others > 0 else ""


def pair_sentences(table: pd.DataFrame, label, subject: str, corrections) -> list[str]:
    """Per correction: the comparison with the most significant wins, the most losses, and the tie share."""
    lines = []
    for c in corrections:
        rows = table[(table["dimension"] == "all") & (table["correction"] == c) & (table["pairs"] > 0)]
        if rows.empty:
            continue
        best = rows.loc[rows["better"].idxmax()]
        worst = rows.loc[rows["worse"].idxmax()]
        total = rows["pairs"].sum()
        equivalent, inconclusive = rows["n_equivalent"].sum() / total, rows["n_inconclusive"].sum() / total
        sentence = (
            f"- **{CORRECTION_NAMES.get(c, c)}**, summed over dimensions ({int(total)} {subject}; "
            f"{pct(equivalent)} shown equivalent, {pct(inconclusive)} inconclusive, together the study's "
            f"{pct(equivalent + inconclusive)} almost equal): "
        )
        if best["better"] > 0:
            sentence += (
                f"the largest share of significant wins is {label(best)} (better in {pct(best['better'])} "
                f"of {int(best['pairs'])}{_ties(rows['better'], best['better'])})"
            )
        else:
            sentence += "no comparison is significantly better for the first side"
        if worst["worse"] > 0:
            sentence += (
                f"; the largest share of significant losses is {label(worst)} (worse in "
                f"{pct(worst['worse'])} of {int(worst['pairs'])}{_ties(rows['worse'], worst['worse'])})."
            )
        else:
            sentence += "; none is significantly worse."
        lines.append(sentence)
    return lines


def size_sentences(analysis: Analysis) -> list[str]:
    lines = []
    for name, models in analysis.series.items():
        curves = analysis.size_curves[analysis.size_curves["series"] == name]
        trend = analysis.size_trend[analysis.size_trend["series"] == name]
        sizes = sorted(set(curves["params_total_b"]))
        defined = trend.dropna(subset=["rho"])
        head = f"- **{name}** ({len(models)} models: {', '.join(models)})"
        if not sizes:
            lines.append(f"{head}: none of its models has an F1 score, so there is no size curve.")
            continue
        if len(sizes) == 1:
            lines.append(
                f"{head}: only the {fmt(sizes[0], 1)}B model(s) have an F1 score (mean "
                f"{fmt(curves['f1'].mean())}), so there is no size curve."
            )
            continue
        sentence = (
            f"- **{name}** ({len(models)} models, {fmt(sizes[0], 1)}B to {fmt(sizes[-1], 1)}B parameters): "
            f"mean F1 over strategies and datasets is {fmt(curves[curves['params_total_b'] == sizes[0]]['f1'].mean())} "
            f"at the smallest size and {fmt(curves[curves['params_total_b'] == sizes[-1]]['f1'].mean())} at the largest."
        )
        if not defined.empty:
            sentence += (
                f" Size and F1 have Spearman rho > 0 on {int((defined['rho'] > 0).sum())} of {len(defined)} "
                f"datasets (mean rho {fmt(defined['rho'].mean())})."
            )
        else:
            sentence += (
                f" Size and F1 have no rank correlation on any dataset: it needs F1 at {rq.MIN_RANKED} or more "
                "sizes, not all equal."
            )
        lines.append(sentence)
    return lines


def error_sentences(errors: pd.DataFrame) -> list[str]:
    """The dominant error type over datasets, and t2c's shares beside the other sets of its task.

    A dataset whose configurations logged no missing, spurious or boundary error has no shares: said so.
    """
    lines = []
    defined = errors.dropna(subset=["share_missing"])
    none = list(errors.loc[errors["share_missing"].isna(), "dataset"])
    if not defined.empty:
        shares = defined[["share_missing", "share_spurious", "share_boundary"]].to_numpy()
        largest = np.isclose(shares, shares.max(axis=1, keepdims=True)).sum(axis=0)
        top = defined.loc[defined["share_missing"].idxmax()]
        lines.append(
            f"- Over {len(defined)} datasets, the largest (or tied largest) error type is missing spans on "
            f"{int(largest[0])}, spurious predictions on {int(largest[1])} and boundary mismatches on "
            f"{int(largest[2])}; the highest missing share is {pct(top['share_missing'])} on {top['dataset']}."
        )
    if none:
        lines.append(
            f"- No missing, spurious or boundary error was counted on {', '.join(none)}, so no error shares there."
        )
    for task in TASK_ORDER:
        part = errors[errors["dataset"].str.startswith(task + "/")]
        clinical = part[(part["dataset"] == f"{task}/t2c") & part["share_missing"].notna()]
        others = part[(part["dataset"] != f"{task}/t2c") & part["share_missing"].notna()]
        if clinical.empty or others.empty:
            continue
        row = clinical.iloc[0]
        lines.append(
            f"- **{task}/t2c**: missing {pct(row['share_missing'])}, spurious {pct(row['share_spurious'])}, boundary "
            f"{pct(row['share_boundary'])} of errors; over the other {len(others)} {task} sets the mean shares are "
            f"{pct(others['share_missing'].mean())}, {pct(others['share_spurious'].mean())} and "
            f"{pct(others['share_boundary'].mean())}."
        )
    return lines


def top_label_sentences(top_gold: Mapping[str, dict]) -> list[str]:
    lines = []
    for task in DATASETS["t2c"].tasks:
        base, clinical = top_gold.get(f"{task}/base"), top_gold.get(f"{task}/t2c")
        if not base or not clinical:
            continue
        shared = {t for t, _ in base["top"]} & {t for t, _ in clinical["top"]}
        (b_text, b_count), (c_text, c_count) = base["top"][0], clinical["top"][0]
        lines.append(
            f'- **{task}**: the most frequent base gold string is "{b_text}" ({pct(b_count / base["spans"])} of '
            f'{base["spans"]} spans), the most frequent t2c one is "{c_text}" ({pct(c_count / clinical["spans"])} '
            f"of {clinical['spans']}); {len(shared)} of the top {len(base['top'])} base strings are also among the "
            f"top {len(clinical['top'])} t2c strings."
        )
    return lines


def run_link(uri: str, experiment_id: str, run_id: str) -> str:
    """A link into the MLflow UI when the store is a server, else the bare run id."""
    if uri.startswith(("http://", "https://")):
        base = redact_uris(uri).rstrip("/")  # a credential in the store URI never reaches the report
        return f"[{run_id}]({base}/#/experiments/{experiment_id}/runs/{run_id})"
    return f"`{run_id}`"


def _minimum(analysis: Analysis) -> int:
    return minimum_documents(analysis.alpha)


def method_lines(analysis: Analysis) -> list[str]:
    """How the numbers below were computed, with this run's settings."""
    name = CORRECTION_NAMES.get(analysis.correction, analysis.correction)
    dims = "; ".join(f"{d}: {', '.join(keys)}" for d, keys in analysis.dimensions.items())
    return [
        "How to read the numbers:",
        "",
        "- Calibrated paired tests per dataset (docs/scoring.md#calibration), each pair of configurations on the "
        "instances both were scored on (configurations scored on the same instances form one comparison set; a pair "
        "across two instance sets uses their intersection; the number of instances of every comparison is under "
        "*Instances per comparison*). i is *better* (or *worse*) than j when a two-sided permutation test that swaps "
        f"the two configurations' statistics within each document gives p < {analysis.alpha} (one draw of swaps per "
        "comparison set), else *equivalent* when two one-sided t tests on the jackknife standard error show "
        f"|F1_i - F1_j| < {analysis.settings.margin} (the equivalence margin), else *inconclusive*: the test could not "
        f"tell. A comparison on fewer than {_minimum(analysis)} documents holding a gold span gets no verdict "
        "(*inconclusive*) and no minimum detectable difference. The study read the smaller of its two one-sided "
        f"bootstrap p-values ({analysis.resamples} resamples) against alpha and called every other pair *almost "
        "equal*; that reading (`study_outcome`, the study's) is shown beside the verdicts.",
        f"- {name} adjusts each pair's two-sided p-value over the family of all pairwise tests "
        f"of prompted configurations on all datasets ({analysis.prompted.pairs} tests), and the TOST p-values "
        f"over the same pairs; the fine-tuned models' comparisons are a family of their own "
        f"({analysis.finetuned.pairs} tests). Its verdicts are shown beside the raw ones.",
        *resampling_lines(analysis),
        "- RQ1 follows ordered pairs better on a base set to each generalization set of the same task "
        "(comp/base to both timex/base and eventx/base); a pair belongs to a group when both configurations do, "
        "and counts on a link when it was tested on both sets.",
        f"- RQ3 counts (model, dataset) cells per dimension ({dims}); dimension *all* sums them.",
        "",
    ]


def instance_lines(analysis: Analysis) -> list[str]:
    """Per family: the n of its comparisons, dataset by dataset where they differ."""
    table = instance_table(analysis)
    lines = []
    for family in analysis.families:
        part = table[table["family"] == family.name]
        if part.empty:
            continue
        mixed, uniform = [], []
        for key, rows in part.groupby("dataset", sort=False):
            tested = rows[rows["instances"] > 0]
            if len(rows) == 1 and not tested.empty:
                uniform.append(f"{key} ({int(tested['instances'].iloc[0])})")
            else:
                mixed.append(
                    f"{key}: "
                    + ", ".join(
                        f"{int(r.pairs)} pair(s) {'share no instance (untested)' if r.instances == 0 else f'on {int(r.instances)}'}"
                        for r in rows.itertuples(index=False)
                    )
                )
        sentence = f"- **{family.name}** ({family.pairs} tests): "
        if uniform:
            sentence += "every pair compared on the same instances on " + ", ".join(uniform)
        if mixed:
            sentence += (
                ("; " if uniform else "") + "pairs compared on different numbers of instances on " + "; ".join(mixed)
            )
        lines.append(sentence + ".")
    return lines


def finetuned_lines(analysis: Analysis, tables: Mapping[str, Path]) -> list[str]:
    family = analysis.finetuned
    lines = ["### Fine-tuned models compared (Figure 11)", ""]
    if not family.tests:
        return lines + [f"Needs at least two fine-tuned models scored on one dataset; here: {len(family.configs)}.", ""]
    pairs = finetuned_pairs(analysis)
    c = analysis.correction
    counts = []
    for correction, column in (("none", "outcome"), (c, f"outcome_{c}")):
        significant = int(pairs[column].isin(["better", "worse"]).sum())
        equivalent = int((pairs[column] == "equivalent").sum())
        counts.append(
            f"{significant} significant and {equivalent} shown equivalent with {CORRECTION_NAMES.get(correction, correction)}"
        )
    lines += [
        f"Calibrated paired test of fine-tuned model a vs b on each dataset, on the instances both were scored on "
        f"(column `instances`): {len(pairs)} tests over {len(family.tests)} datasets, " + " and ".join(counts) + ".",
        "",
        markdown_table(
            linked_pairs(pairs, c, compare_link(Path(tables["finetuned_pairwise"]).parent.parent)), index=False
        ),
        "",
    ]
    return lines


def provenance_lines(analysis: Analysis) -> list[str]:
    """The report's provenance section: which runs, by key, code and data version (what any
    machine re-running the study computes alike); their history is on the provenance page."""
    results = analysis.results
    table = analysis.provenance.copy()
    lines = ["## Provenance", ""]
    if results.checked:
        lines += [
            f"Every number above comes from exactly the runs the pipeline's summary files name ({len(table)} "
            "summaries, each naming its run by key: a digest of the run's configuration, code version and data "
            "version, which the MLflow run carries as the tag `tempgen.key`); runs logged by hand or by other "
            "profiles are not read. Data versions were checked: the raw corpora's hash is the same for every "
            "run, and runs scored on the same datasets have the same dataset digest.",
            "",
        ]
    else:
        lines += ["These runs were not read through the pipeline's summaries, so their provenance was not checked.", ""]
    lines += [
        "Run ids, commits, the tracking store and what the runs sent and spent are this machine's history, not "
        "part of the result: [provenance.md](provenance.md), written beside this report (docs/mlflow.md).",
        "",
    ]
    for column in ("key", "code_version", "data_version"):
        table[column] = [f"`{v}`" if isinstance(v, str) and v else v for v in table[column]]
    return lines + [markdown_table(table), ""]


def history_page(analysis: Analysis) -> str:
    """``provenance.md``: the runs' history on this machine (run ids linked into the MLflow UI,
    commits, the store, spend); not a DVC output, as it differs from one machine to the next."""
    results = analysis.results
    table = history_table(results.runs)
    lines = [
        "# Provenance: this machine's runs",
        "",
        f"Experiment `{results.experiment_name}` (id {results.experiment_id or 'not read'}) at "
        f"`{redact_uris(results.tracking_uri)}`. A run id is empty where this machine has no record of the "
        "run (a pulled study: `python -m src.evidence restore` rebuilds the runs, found by their key).",
        "",
    ]
    dirty = [config for config, flag in table["dirty"].items() if flag]
    if dirty:
        lines += [
            f"**Uncommitted changes**: the runs of {', '.join(dirty)} were logged from a working tree with "
            "uncommitted changes (commit ending in `-dirty`), so their commit alone does not reproduce them.",
            "",
        ]
    lines += usage_lines(results.usage) + rewriting_lines(results.rewriting_usage)
    table["run_id"] = [run_link(results.tracking_uri, results.experiment_id, r) if r else "" for r in table["run_id"]]
    table["git_commit"] = [f"`{c}`" if isinstance(c, str) else c for c in table["git_commit"]]
    table.insert(0, "key", [f"`{k}`" for k in results.runs.get("key", pd.Series("", index=table.index))])
    return "\n".join(lines + [markdown_table(table), ""])


def rewriting_lines(usage: dict[str, float]) -> list[str]:
    """What the paid rewriting stages (``adv_p`` with an API generator) sent and spent: their history
    files summed; the sweep's cap covered them (one ledger)."""
    if not usage:
        return []

    def count(name: str) -> str:
        return f"{int(usage.get(name, 0)):,}"

    return [
        f"**Rewriting** (the {count('runs')} `adv_p` stages with an API generator, as each logged its spend): "
        f"{count('requests')} requests, of which {count('sent')} sent ({count('attempts')} attempts, "
        f"{count('retried')} of them retries), {count('cached')} answered from the cache; "
        f"{count('prompt_tokens')} prompt and {count('completion_tokens')} completion tokens; new cost "
        f"{usd(usage.get('cost', 0.0))}, reserved in the sweep's ledger beside the runs.",
        "",
    ]


def usage_lines(usage: dict[str, float]) -> list[str]:
    """What the study's runs sent and spent, summed over their summaries (the sweep total)."""
    if not usage:
        return []

    def count(name: str) -> str:
        return f"{int(usage.get(name, 0)):,}"

    def money(name: str) -> str:
        return usd(usage.get(name, 0.0))

    estimated = int(usage.get("estimated_prompt_tokens", 0)) + int(usage.get("estimated_completion_tokens", 0))
    parts = sum(usage.get(name, 0.0) for name in ("cost_reported", "cost_price_table", "cost_estimated"))
    unsplit = usage.get("cost", 0.0) - parts
    split = ""
    if "cost_reported" in usage:
        split = (
            f"provider-reported {money('cost_reported')}, price table {money('cost_price_table')}, estimated "
            f"{money('cost_estimated')}"
        )
    if abs(unsplit) > 1e-9:  # runs logged before the split: reported and price-table costs together
        split += ("; " if split else "") + f"{usd(unsplit)} from runs that logged no split"
    split = f" ({split})" if split else ""
    billed = f", {count('billed_attempts')} of them billed" if "billed_attempts" in usage else ""
    return [
        f"**Requests and cost** (the {count('runs')} prompted runs' totals, as each logged them in `usage.json`): "
        f"{count('requests')} requests, of which {count('sent')} sent ({count('attempts')} attempts{billed}, "
        f"{count('retried')} of them retries; {count('failed')} failed), {count('cached')} answered from the cache "
        f"and {count('duplicates')} identical to another prompt of the same run; {count('prompt_tokens')} prompt "
        f"and {count('completion_tokens')} completion tokens sent ({estimated:,} of them counted here where a "
        f"reply reported none); new cost {money('cost')}{split}, cached answers' cost {money('cached_cost')}. "
        "Provider-reported: the replies' own `usage.cost`; price table: reported tokens at the model files' "
        "`price:` blocks; estimated: tokens counted with the model's tokenizer or at characters / 4; local "
        "models cost nothing.",
        "",
    ]
