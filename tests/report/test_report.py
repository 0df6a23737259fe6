"""Figures and report end to end: on real MLflow runs, and on the small inputs of the default profile."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from src.analyze import main, write_outputs
from src.report.analysis import run_analysis
from src.report.prose import run_link
from src.report.results import build_results as build_study
from src.report.summary import analysis_summary
from tests.helpers.analysis_settings import STUDY
from tests.helpers.mlflow_study import EXPERIMENT

FIGURES = [
    "rq1_transfer",
    "rq2_spearman_all",
    "rq2_spearman_inductive_plus",
    "rq2_spearman_non_inductive",
    "rq3_strategy_pairs",
    "rq3_dense_vs_moe",
    "rq3_size_curves",
    "error_types",
    "top_labels_base_vs_t2c",
]


@pytest.fixture(scope="session")
def report_dir(store, tmp_path_factory):
    out = tmp_path_factory.mktemp("reports")
    stats = out / "stats.json"
    stats.write_text(
        json.dumps(
            {
                task: {
                    name: {"spans": 50, "top_gold": [[f"{name}-{task}-{k}", 10 - k] for k in range(5)]}
                    for name in ("base", "t2c")
                }
                for task in ("timex", "eventx")
            }
        )
    )
    code = main(
        [
            "--experiment",
            EXPERIMENT,
            "--tracking-uri",
            store.uri,
            "--summaries",
            str(store.summaries),
            "--out",
            str(out),
            "--resamples",
            "200",
            "--seed",
            "3",
            "--stats-json",
            str(stats),
        ]
    )
    assert code == 0
    return out


def table_row(text: str, config: str) -> list[str]:
    """Cells of the first markdown table row of ``config`` after the results heading of a task."""
    for line in text.splitlines():
        if line.startswith(f"| {config} |"):
            return [cell.strip() for cell in line.strip("|").split("|")]
    raise AssertionError(f"no row for {config}")


def test_every_output_file_is_written(report_dir):
    for name in FIGURES:
        for suffix in (".png", ".svg"):
            assert (report_dir / "figures" / f"{name}{suffix}").stat().st_size > 1000
    assert (report_dir / "tables" / "pairwise.csv").exists()
    for name in (
        "results_timex",
        "results_eventx",
        "results_comp",
        "finetuned",
        "rq1_transfer",
        "rq2_all_rho",
        "rq3_strategy_pairs",
        "rq3_dense_vs_moe",
        "rq3_size_curves",
        "error_types",
        "configurations",
        "provenance",
        "comparisons",
    ):
        assert (report_dir / "tables" / f"{name}.csv").exists() and (report_dir / "tables" / f"{name}.md").exists()
    html = (report_dir / "report.html").read_text()
    assert "<table>" in html and 'src="figures/rq1_transfer.png"' in html


def analysis_intervals(report_dir) -> dict[tuple[str, str], tuple[float, float]]:
    """(configuration, dataset) -> the analysis's 95% interval (resampling documents) from tables/intervals.csv."""
    table = pd.read_csv(report_dir / "tables" / "intervals.csv")
    table = table[table["unit"] == "document"]
    return {
        (c, d): (low, high)
        for c, d, low, high in zip(table["configuration"], table["dataset"], table["f1_ci_low"], table["f1_ci_high"])
    }


def test_report_numbers_equal_the_mlflow_metrics(store, report_dir):
    uri, ids, _ = store
    client = MlflowClient(uri)
    report = (report_dir / "report.md").read_text()
    timex = report[report.index("### timex") : report.index("### eventx")]
    header = table_row(timex, "configuration")
    csv = pd.read_csv(report_dir / "tables" / "dataset_timex_t2c.csv", index_col=0)
    intervals = analysis_intervals(report_dir)
    for config, run_id in ids.items():
        if config.endswith("-finetuned"):
            continue
        metrics = client.get_run(run_id).data.metrics
        cells = dict(zip(header, table_row(timex, config)))
        for dataset in ("base", "adv_p", "t2c"):
            f1 = metrics[f"timex.{dataset}.f1"]  # the logged F1, the analysis's (document-resampled) interval
            low, high = intervals[config, f"timex/{dataset}"]
            assert cells[f"timex/{dataset}"] == f"{f1:.3f} [{low:.3f}, {high:.3f}]"
            instance = csv.loc[config, ["f1_ci_low_instance", "f1_ci_high_instance"]] if dataset == "t2c" else None
            if instance is not None:
                assert instance.notna().all() and instance.iloc[0] <= f1 <= instance.iloc[1]
        assert csv.loc[config, "f1"] == metrics["timex.t2c.f1"]
        assert csv.loc[config, "errors.missing"] == metrics["timex.t2c.errors.missing"]
        assert run_id in report


def test_finetuned_models_have_their_own_table(store, report_dir):
    uri, ids, _ = store
    metrics = MlflowClient(uri).get_run(ids["bert-finetuned"]).data.metrics
    report = (report_dir / "report.md").read_text()
    table = report[report.index("### Fine-tuned models (Table 10)") : report.index("Per-dataset details")]
    cells = dict(zip(table_row(table, "configuration"), table_row(table, "bert-finetuned")))
    f1 = metrics["timex.t2c.f1"]
    low, high = analysis_intervals(report_dir)["bert-finetuned", "timex/t2c"]
    assert cells["timex/t2c"] == f"{f1:.3f} [{low:.3f}, {high:.3f}]"
    assert "bert-finetuned" not in report[report.index("### timex") : report.index("### Fine-tuned")]
    pairwise = pd.read_csv(report_dir / "tables" / "pairwise.csv")
    assert not pairwise[["config_a", "config_b"]].isin(["bert-finetuned"]).any().any()
    assert "Needs at least two fine-tuned models scored on one dataset; here: 1." in report


def test_summary_sentences_state_computed_values(report_dir):
    report = (report_dir / "report.md").read_text()
    rq1 = pd.read_csv(report_dir / "tables" / "rq1_transfer.csv")
    pooled = rq1[(rq1["group"] == "all") & (rq1["target"] == "all") & (rq1["correction"] == "none")].iloc[0]
    assert f"{int(pooled['pairs'])} (pair, link) cases start significantly better on base" in report
    assert f"stay better in {100 * pooled['better']:.1f}%" in report
    assert "Holm" in report and "raw p" in report
    assert "MoE vs dense in family fam" in report
    assert "**fam-sizes** (2 models, 1.0B to 8.0B parameters)" in report
    assert 'the most frequent base gold string is "base-timex-0" (20.0% of 50 spans)' in report


def test_analysis_json_matches_the_pairwise_table(report_dir):
    summary = json.loads((report_dir / "analysis.json").read_text())
    pairwise = pd.read_csv(report_dir / "tables" / "pairwise.csv")
    for key, entry in summary["significant_pairs"].items():
        rows = pairwise[pairwise["dataset"] == key]
        assert entry["pairs"] == len(rows)
        raw = ((rows["outcome"] == "better") | (rows["outcome"] == "worse")).sum()
        adjusted = rows["outcome_holm"].isin(["better", "worse"]).sum()
        assert entry["significant_none"] == raw and entry["significant_holm"] == adjusted <= raw
    assert summary["configurations"] == 7 and summary["prompted"] == 6 and summary["correction"] == "holm"
    assert summary["rq3"]["size_series"] == {"fam-sizes": ["small", "large"]}


def single_model_study(strategies=("I", "D", "A", "D+I", "A+I", "A+D", "A+D+I")):
    """The default profile's shape: one embedded model under the seven strategies."""
    rng = np.random.default_rng(0)
    runs, metrics, artifacts = [], {}, {}
    for n, strategy in enumerate(strategies):
        config = f"solo-{strategy}"
        runs.append(
            {
                "config": config,
                "run_id": f"run{n}",
                "start_time": n,
                "model": "solo",
                "strategy": strategy,
                "kind": "prompted",
                "family": "smollm",
                "architecture": "dense",
                "params_total_b": 0.135,
                "params_active_b": 0.135,
                "inductive_plus": "I" in strategy,
                "size_series": None,
                "git_commit": "c0ffee",
                "data_version": "raw:x/datasets:y",
                "seed": 13,
            }
        )
        metrics[config], artifacts[config] = {}, {}
        for task, dataset in (("timex", "base"), ("timex", "adv"), ("eventx", "base"), ("comp", "base")):
            stats = np.column_stack([rng.uniform(0, 1, 8), np.full(8, 1.0), np.full(8, 1.0)])
            f1 = 2 * stats[:, 0].sum() / 16
            metrics[config].update(
                {
                    f"{task}.{dataset}.f1": f1,
                    f"{task}.{dataset}.f1_ci_low": f1 - 0.1,
                    f"{task}.{dataset}.f1_ci_high": f1 + 0.1,
                    f"{task}.{dataset}.errors.missing": 2.0,
                    f"{task}.{dataset}.errors.spurious": 1.0,
                    f"{task}.{dataset}.errors.boundary": 1.0,
                }
            )
            artifacts[config][task, dataset] = {"ids": [f"i{k}" for k in range(8)], "stats": {"lcs": stats.tolist()}}
    return build_study(runs, metrics, artifacts, "sqlite:///x.db", "tempgen", "1")


def test_one_model_only_says_which_sections_need_more_models(tmp_path):
    analysis = run_analysis(single_model_study(), resamples=100, seed=0, alpha=0.05, correction="holm", **STUDY)
    written = write_outputs(analysis, tmp_path)
    report = written["report"].read_text()
    assert "needs more models: no family has both a dense and a MoE model (families: smollm: dense)" in report
    assert "This analysis needs more models: no size series" in report
    assert "**all** (7 configurations)" in report and "**non-inductive** (3 configurations)" in report
    assert (tmp_path / "figures" / "rq3_strategy_pairs.png").exists()
    assert not (tmp_path / "figures" / "rq3_dense_vs_moe.png").exists()
    assert analysis_summary(analysis)["rq3"]["dense_vs_moe"].startswith("needs more models")


def test_a_single_configuration_still_gives_a_report(tmp_path):
    analysis = run_analysis(single_model_study(("I",)), resamples=50, seed=0, alpha=0.05, correction="holm", **STUDY)
    report = write_outputs(analysis, tmp_path)["report"].read_text()
    assert not analysis.tests
    assert "only 1 configuration(s); a rank correlation needs at least 3" in report
    assert "Needs at least one model with two strategies" in report


def test_run_links_point_into_the_mlflow_ui_only_for_a_server():
    assert run_link("http://mlflow:5000/", "3", "abc") == "[abc](http://mlflow:5000/#/experiments/3/runs/abc)"
    assert run_link("sqlite:///mlruns/mlflow.db", "3", "abc") == "`abc`"


def test_provenance_section_names_every_run_by_key_and_the_history_page_by_id(store, report_dir):
    report = (report_dir / "report.md").read_text()
    section = report[report.index("## Provenance") : report.index("## Configurations")]
    for config, key in store.ids.items():  # in these stores a run's key is its id
        assert f"| {config} | " in section and f"`{key}`" in section
    assert "runs/large-I.json" in section and "`raw:test/datasets:test`" in section
    assert "abc123" not in report and "[provenance.md](provenance.md)" in section  # the commit is history
    history = (report_dir / "provenance.md").read_text()
    assert "`abc123`" in history and "Uncommitted changes" not in history
    summary = json.loads((report_dir / "analysis.json").read_text())
    assert summary["provenance"]["large-I"]["key"] == store.ids["large-I"]
    assert "run_id" not in summary["provenance"]["large-I"] and "usage" not in summary
    provenance = pd.read_csv(report_dir / "tables" / "provenance.csv", index_col=0)
    assert provenance.loc["bert-finetuned", "summary"] == "finetuned/bert-finetuned.json"


def pairs_study():
    """Prompted m-I and m-D on 400 instances, m-A on 5 of them; fine-tuned ft1 and ft2 on all 400."""
    rng = np.random.default_rng(1)
    ids = [f"i{k}" for k in range(400)]
    few = ids[::80]
    runs, metrics, artifacts = [], {}, {}
    quality = {"m-I": 0.7, "m-D": 0.4, "m-A": 0.5, "ft1-finetuned": 0.9, "ft2-finetuned": 0.3}
    for n, (config, rate) in enumerate(quality.items()):
        model, strategy = config.rsplit("-", 1)
        kind = "finetuned" if strategy == "finetuned" else "prompted"
        runs.append(
            {
                "config": config,
                "run_id": f"run{n}",
                "start_time": n,
                "model": model,
                "strategy": strategy,
                "kind": kind,
                "family": model,
                "architecture": "dense",
                "params_total_b": 1.0,
                "params_active_b": 1.0,
                "inductive_plus": "I" in strategy,
                "size_series": None,
                "git_commit": "c0ffee",
                "data_version": "raw:x/datasets:y",
                "seed": 13,
                "summary": f"{config}.json",
            }
        )
        metrics[config], artifacts[config] = {}, {}
        own = few if config == "m-A" else ids
        for task, dataset in (("timex", "base"), ("timex", "t2c")):
            stats = np.column_stack([rng.binomial(1, rate, len(own)), np.ones(len(own)), np.ones(len(own))])
            metrics[config][f"{task}.{dataset}.f1"] = float(stats[:, 0].mean())
            artifacts[config][task, dataset] = {"ids": list(own), "stats": {"lcs": stats.tolist()}}
    return build_study(runs, metrics, artifacts, "sqlite:///x.db", "tempgen", "1")


def test_each_pair_uses_the_instances_both_were_scored_on_and_the_report_says_so(tmp_path):
    analysis = run_analysis(pairs_study(), resamples=200, seed=0, alpha=0.05, correction="holm", **STUDY)
    written = write_outputs(analysis, tmp_path / "first")
    summary = json.loads(written["summary"].read_text())
    for key in ("timex/base", "timex/t2c"):
        entry = summary["significant_pairs"][key]
        assert entry["pairs"] == 3
        assert entry["comparisons"] == [{"instances": 400, "pairs": 1}, {"instances": 5, "pairs": 2}]
        finetuned = summary["finetuned_pairs"][key]
        assert finetuned["comparisons"] == [{"instances": 400, "pairs": 1}]
        assert [(t["a"], t["b"], t["instances"], t["outcome"]) for t in finetuned["tests"]] == [
            ("ft1-finetuned", "ft2-finetuned", 400, "better")
        ]
    pairwise = pd.read_csv(tmp_path / "first" / "tables" / "pairwise.csv")
    base = pairwise[pairwise["dataset"] == "timex/base"].set_index(["config_a", "config_b"])["instances"].to_dict()
    assert base == {("m-I", "m-D"): 400, ("m-I", "m-A"): 5, ("m-D", "m-A"): 5}
    report = written["report"].read_text()
    assert (
        "- **prompted** (6 tests): pairs compared on different numbers of instances on timex/base: "
        "1 pair(s) on 400, 2 pair(s) on 5; timex/t2c: 1 pair(s) on 400, 2 pair(s) on 5."
    ) in report
    assert (
        "- **fine-tuned** (2 tests): every pair compared on the same instances on timex/base (400), timex/t2c (400)."
        in report
    )
    assert "| prompted | timex/base | 400 | 1 |" in report and "| prompted | timex/base | 5 | 2 |" in report
    section = report[report.index("### Fine-tuned models compared (Figure 11)") :]
    assert "| timex/base | ft1-finetuned | ft2-finetuned | 400 |" in section
    comparisons = pd.read_csv(tmp_path / "first" / "tables" / "comparisons.csv")
    assert comparisons[comparisons["family"] == "fine-tuned"]["instances"].tolist() == [400, 400]
    # the same inputs give byte-identical analysis.json and tables
    again = write_outputs(
        run_analysis(pairs_study(), resamples=200, seed=0, alpha=0.05, correction="holm", **STUDY), tmp_path / "second"
    )
    assert again["summary"].read_bytes() == written["summary"].read_bytes()
    assert again["report"].read_bytes() == written["report"].read_bytes()
    for table in sorted((tmp_path / "first" / "tables").iterdir()):
        assert (tmp_path / "second" / "tables" / table.name).read_bytes() == table.read_bytes(), table.name


def test_cli_errors_are_clear_and_exit_2(store, capsys):
    uri = store.uri
    assert main(["--experiment", "missing", "--tracking-uri", uri, "--summaries", str(store.summaries)]) == 2
    assert "no MLflow experiment named 'missing'" in capsys.readouterr().err
    assert main(["--experiment", EXPERIMENT, "--tracking-uri", uri, "--alpha", "0.7"]) == 2
    assert "--alpha must be in (0, 0.5)" in capsys.readouterr().err


def test_the_report_opens_with_the_headline_in_order(report_dir):
    report = (report_dir / "report.md").read_text()
    lines = report.splitlines()
    assert lines[2].startswith("**Profile** not recorded · **models** large, small, sparse, bert · **strategies** I, D")
    assert "**instances** 20 per set, except timex/adv_p: 19" in lines[2]
    assert lines[4] == (
        "Provenance: 7 runs (keys in [Provenance](#provenance)), code version none recorded, data version "
        "raw:test/datasets:test; run ids, commits and spend: [provenance.md](provenance.md)."
    )
    order = ["## Findings", "## F1 by configuration", "## Generalization gap", "## Methods", "## Results per dataset"]
    assert [report.index(h) for h in order] == sorted(report.index(h) for h in order)
    findings = report[report.index("## Findings") : report.index("## F1 by configuration")]
    items = [line for line in findings.splitlines() if re.match(r"\d\. ", line)]
    assert 1 <= len(items) <= 5 and all(re.search(r"\(\[table\]\(tables/\w+\.csv\)\)$", i) for i in items)
    assert all((report_dir / re.search(r"\(tables/(\w+\.csv)\)", i).group(0)[1:-1]).exists() for i in items)
    html = (report_dir / "report.html").read_text()
    assert '<h2 id="provenance">Provenance</h2>' in html and 'table class="heatmap"' in html
    assert "heatmap_f1.png" not in html  # the HTML shows the coloured table instead of the picture


def test_the_heatmap_csv_and_its_hover_text_hold_the_mlflow_numbers(store, report_dir):
    client = MlflowClient(store.uri)
    cells = pd.read_csv(report_dir / "tables" / "heatmap_f1.csv")
    assert len(cells) == 6 * 5 + 3  # six prompted configurations on five sets, the fine-tuned one on three
    html = (report_dir / "report.html").read_text()
    intervals = analysis_intervals(report_dir)
    for row in cells.itertuples(index=False):
        task, dataset = row.dataset.split("/")
        metrics = client.get_run(store.ids[row.configuration]).data.metrics
        assert row.f1 == metrics[f"{task}.{dataset}.f1"]
        assert (row.f1_ci_low, row.f1_ci_high) == intervals[row.configuration, row.dataset]
        title = (
            f"{row.configuration} on {row.dataset}: F1 {row.f1:.3f}, 95% CI [{row.f1_ci_low:.3f}, {row.f1_ci_high:.3f}]"
        )
        assert f'title="{title}"' in html
    # by model, then the study's strategy order; fine-tuned last
    configs = ["large-I", "large-D", "small-I", "small-D", "sparse-I", "sparse-D", "bert-finetuned"]
    assert list(dict.fromkeys(cells["configuration"])) == configs
    assert list(dict.fromkeys(cells["dataset"])) == [
        "timex/base",
        "timex/adv_p",
        "timex/t2c",
        "eventx/base",
        "comp/base",
    ]


def test_the_gap_is_the_shifted_f1_minus_the_base_f1_with_corrected_marks(store, report_dir):
    gaps = pd.read_csv(report_dir / "tables" / "generalization_gap.csv")
    client = MlflowClient(store.uri)
    assert set(gaps["dataset"]) == {"timex/adv_p", "timex/t2c", "comp/base"}
    for row in gaps.itertuples(index=False):
        metrics = client.get_run(store.ids[row.configuration]).data.metrics
        shifted = metrics[f"{row.dataset.replace('/', '.')}.f1"]
        base = metrics[f"{row.reference.replace('/', '.')}.f1"]
        assert row.gap == pytest.approx(shifted - base)
        assert row.p_holm >= row.p_value
        equivalent = row.p_equivalent_holm < 0.05
        expected = "*" if row.p_holm < 0.05 else "°" if row.p_value < 0.05 else "≈" if equivalent else ""
        assert row.mark == expected or (isinstance(row.mark, float) and expected == "")
        verdict = ("better" if row.gap > 0 else "worse") if row.p_holm < 0.05 else None
        assert row.verdict_holm == (verdict or ("equivalent" if equivalent else "inconclusive"))
        assert row.p_equivalent_holm >= row.p_equivalent
    perfect = gaps[gaps["configuration"] == "large-I"]  # F1 1.0 everywhere: no gap, nothing significant
    assert (perfect["gap"] == 0).all() and (perfect["p_value"] == 1).all()
    assert (perfect["verdict_holm"] == "equivalent").all() and (perfect["mark"] == "≈").all()  # shown, not assumed
    worst = gaps[(gaps["configuration"] == "sparse-D") & (gaps["dataset"] == "comp/base")]
    assert (worst["gap"] < -0.2).all() and (worst["p_holm"] < 0.05).all()
    report = (report_dir / "report.md").read_text()
    section = report[report.index("## Generalization gap") : report.index("## Methods")]
    assert "| sparse-D | " in section and f"{worst['gap'].iloc[0]:+.3f}*" in section


def test_cells_above_warn_rate_are_flagged_with_a_legend(tmp_path):
    study = single_model_study(("I", "D", "A"))
    scores = study.scores
    scores["parse_failure_rate"] = 0.0
    scores["served_model_mismatch_rate"] = 0.0
    at = (scores["config"] == "solo-D") & (scores["dataset"] == "adv")
    scores.loc[at, "parse_failure_rate"] = 0.125
    scores.loc[(scores["config"] == "solo-I") & (scores["task"] == "comp"), "served_model_mismatch_rate"] = 0.05
    scores["refusal_rate"] = 0.0
    scores.loc[(scores["config"] == "solo-A") & (scores["task"] == "eventx"), "refusal_rate"] = 0.1
    written = write_outputs(run_analysis(study, resamples=50, seed=0, alpha=0.05, correction="holm", **STUDY), tmp_path)
    report = written["report"].read_text()
    assert (
        "⚠ marks the 2 cell(s) where parse failures, truncated answers, empty answers, refusals, served-model "
        "mismatches, served-provider mismatches exceed warn_rate 5%" in report
    )
    assert "| solo-D | timex/adv | parse failures 12.5% |" in report  # exactly 5% is not above
    assert "| solo-A | eventx/base | refusals 10.0% |" in report
    html = written["html"].read_text()
    assert html.count("⚠</td>") == 2 and "solo-D on timex/adv: F1" in html and "parse failures 12.5%" in html
    cells = pd.read_csv(tmp_path / "tables" / "heatmap_f1.csv").fillna("")
    assert sorted(cells[cells["flags"] != ""][["configuration", "dataset", "flags"]].values.tolist()) == [
        ["solo-A", "eventx/base", "refusals 10.0%"],
        ["solo-D", "timex/adv", "parse failures 12.5%"],
    ]


def test_nothing_empty_is_drawn_and_empty_rows_are_counted(tmp_path):
    from src.report.tables import compact_table

    analysis = run_analysis(single_model_study(("I",)), resamples=50, seed=0, alpha=0.05, correction="holm", **STUDY)
    written = write_outputs(analysis, tmp_path)
    report = written["report"].read_text()
    assert not list((tmp_path / "figures").glob("rq2_spearman*"))  # no blank correlation image
    assert "No figure: no group has a rank correlation (reasons above)." in report
    assert "No figure: no pair of configurations is significantly better on a base set." in report
    findings = report[report.index("## Findings") : report.index("## F1 by")]
    # one configuration: no pair to compare, only its own gaps are tested
    assert [line[:20] for line in findings.splitlines() if line[:2] == "1."] == ["1. F1 drops from bas"]
    assert "2. " not in findings
    table = pd.DataFrame({"f1": [0.5, np.nan, np.nan], "pairs": [3, 0, np.nan]}, index=["a", "b", "c"])
    assert compact_table(table).splitlines()[-1] == "2 rows with nothing to show (all values missing) left out."
    assert "| a | 0.500 | 3 |" in compact_table(table) and "| b |" not in compact_table(table)
    assert compact_table(table.iloc[1:]) == "Nothing to show: all 2 rows are empty."


def test_findings_name_their_power_and_nothing_is_called_equal_without_the_test(report_dir):
    report = (report_dir / "report.md").read_text()
    findings = report[report.index("## Findings") : report.index("## F1 by configuration")]
    items = [line for line in findings.splitlines() if line[:2].rstrip(".").isdigit()]
    assert items and all("minimum detectable difference" in line for line in items)
    power = pd.read_csv(report_dir / "tables" / "power.csv")
    margin = json.loads((report_dir / "analysis.json").read_text())["equivalence_margin"]
    if (power["mdd"] > margin).all():
        assert all("underpowered" in line for line in items if "calibrated paired test" in line)
    for line in report.splitlines():  # "almost equal" is only ever the study's reading, never a verdict
        if "almost equal" in line:
            assert "study" in line, line
    pairwise = pd.read_csv(report_dir / "tables" / "pairwise.csv")
    assert set(pairwise["outcome_holm"]) <= {"better", "worse", "equivalent", "inconclusive"}
    # the study's reading is its own one-sided bootstrap rule, beside the calibrated verdict
    expected = np.where(
        pairwise["p_a_better"] < 0.05, "better", np.where(pairwise["p_b_better"] < 0.05, "worse", "almost equal")
    )
    assert (pairwise["study_outcome"] == expected).all()
    decided = pairwise["outcome_holm"].isin(["better", "worse"])
    assert (pairwise.loc[decided, "p_holm"] < 0.05).all()
    assert (pairwise.loc[pairwise["documents"] < 6, "outcome"] == "inconclusive").all()
    equivalent = pairwise["outcome_holm"] == "equivalent"
    assert (pairwise.loc[equivalent, "p_equivalent_holm"] < 0.05).all()
