"""Figures and report end to end: on real MLflow runs, and on the small inputs of the default profile."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from src.analyze import analysis_summary, main, run_analysis, write_outputs
from src.report.loading import build_study
from src.report.writer import run_link
from tests.report.test_loading import EXPERIMENT, shared_store

FIGURES = ["rq1_transfer", "rq2_spearman_all", "rq2_spearman_inductive_plus", "rq2_spearman_non_inductive",
           "rq3_strategy_pairs", "rq3_dense_vs_moe", "rq3_size_curves",
           "error_types", "top_labels_base_vs_t2c"]


@pytest.fixture(scope="session")
def store(tmp_path_factory):
    return shared_store(tmp_path_factory)


@pytest.fixture(scope="session")
def report_dir(store, tmp_path_factory):
    uri, _ = store
    out = tmp_path_factory.mktemp("reports")
    stats = out / "stats.json"
    stats.write_text(json.dumps({
        task: {name: {"spans": 50, "top_gold": [[f"{name}-{task}-{k}", 10 - k] for k in range(5)]}
               for name in ("base", "t2c")} for task in ("timex", "eventx")
    }))
    code = main(["--experiment", EXPERIMENT, "--tracking-uri", uri, "--out", str(out), "--resamples", "200",
                 "--seed", "3", "--stats-json", str(stats)])
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
    for name in ("results_timex", "results_eventx", "results_comp", "finetuned", "rq1_transfer", "rq2_all_rho",
                 "rq3_strategy_pairs", "rq3_dense_vs_moe", "rq3_size_curves", "error_types", "configurations"):
        assert (report_dir / "tables" / f"{name}.csv").exists() and (report_dir / "tables" / f"{name}.md").exists()
    html = (report_dir / "report.html").read_text()
    assert "<table>" in html and 'src="figures/rq1_transfer.png"' in html


def test_report_numbers_equal_the_mlflow_metrics(store, report_dir):
    uri, ids = store
    client = MlflowClient(uri)
    report = (report_dir / "report.md").read_text()
    timex = report[report.index("### timex"):report.index("### eventx")]
    header = table_row(timex, "configuration")
    csv = pd.read_csv(report_dir / "tables" / "dataset_timex_t2c.csv", index_col=0)
    for config, run_id in ids.items():
        if config.endswith("-finetuned"):
            continue
        metrics = client.get_run(run_id).data.metrics
        cells = dict(zip(header, table_row(timex, config)))
        for dataset in ("base", "adv_p", "t2c"):
            f1, low, high = (metrics[f"timex.{dataset}.{m}"] for m in ("f1", "f1_ci_low", "f1_ci_high"))
            assert cells[f"timex/{dataset}"] == f"{f1:.3f} [{low:.3f}, {high:.3f}]"
        assert csv.loc[config, "f1"] == metrics["timex.t2c.f1"]
        assert csv.loc[config, "errors.missing"] == metrics["timex.t2c.errors.missing"]
        assert run_id in report


def test_finetuned_models_have_their_own_table(store, report_dir):
    uri, ids = store
    metrics = MlflowClient(uri).get_run(ids["bert-finetuned"]).data.metrics
    report = (report_dir / "report.md").read_text()
    table = report[report.index("### Fine-tuned models (Table 10)"):report.index("Per-dataset details")]
    cells = dict(zip(table_row(table, "configuration"), table_row(table, "bert-finetuned")))
    f1, low, high = (metrics[f"timex.t2c.{m}"] for m in ("f1", "f1_ci_low", "f1_ci_high"))
    assert cells["timex/t2c"] == f"{f1:.3f} [{low:.3f}, {high:.3f}]"
    assert "bert-finetuned" not in report[report.index("### timex"):report.index("### Fine-tuned")]
    pairwise = pd.read_csv(report_dir / "tables" / "pairwise.csv")
    assert not pairwise[["config_a", "config_b"]].isin(["bert-finetuned"]).any().any()


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
        runs.append({"config": config, "run_id": f"run{n}", "start_time": n, "model": "solo", "strategy": strategy,
                     "kind": "prompted", "family": "smollm", "architecture": "dense", "params_total_b": 0.135,
                     "params_active_b": 0.135, "inductive_plus": "I" in strategy, "size_series": None,
                     "git_commit": "c0ffee", "data_version": "raw:x/datasets:y", "seed": 13})
        metrics[config], artifacts[config] = {}, {}
        for task, dataset in (("timex", "base"), ("timex", "adv"), ("eventx", "base"), ("comp", "base")):
            stats = np.column_stack([rng.uniform(0, 1, 8), np.full(8, 1.0), np.full(8, 1.0)])
            f1 = 2 * stats[:, 0].sum() / 16
            metrics[config].update({f"{task}.{dataset}.f1": f1, f"{task}.{dataset}.f1_ci_low": f1 - 0.1,
                                    f"{task}.{dataset}.f1_ci_high": f1 + 0.1, f"{task}.{dataset}.errors.missing": 2.0,
                                    f"{task}.{dataset}.errors.spurious": 1.0, f"{task}.{dataset}.errors.boundary": 1.0})
            artifacts[config][task, dataset] = {"ids": [f"i{k}" for k in range(8)], "stats": {"lcs": stats.tolist()}}
    return build_study(runs, metrics, artifacts, "sqlite:///x.db", "tempgen", "1")


def test_one_model_only_says_which_sections_need_more_models(tmp_path):
    analysis = run_analysis(single_model_study(), resamples=100, seed=0)
    written = write_outputs(analysis, tmp_path)
    report = written["report"].read_text()
    assert "needs more models: no family has both a dense and a MoE model (families: smollm: dense)" in report
    assert "This analysis needs more models: no size series" in report
    assert "**all** (7 configurations)" in report and "**non-inductive** (3 configurations)" in report
    assert (tmp_path / "figures" / "rq3_strategy_pairs.png").exists()
    assert not (tmp_path / "figures" / "rq3_dense_vs_moe.png").exists()
    assert analysis_summary(analysis)["rq3"]["dense_vs_moe"].startswith("needs more models")


def test_a_single_configuration_still_gives_a_report(tmp_path):
    analysis = run_analysis(single_model_study(("I",)), resamples=50, seed=0)
    report = write_outputs(analysis, tmp_path)["report"].read_text()
    assert not analysis.tests
    assert "only 1 configuration(s); a rank correlation needs at least 3" in report
    assert "Needs at least one model with two strategies" in report


def test_run_links_point_into_the_mlflow_ui_only_for_a_server():
    assert run_link("http://mlflow:5000/", "3", "abc") == "[abc](http://mlflow:5000/#/experiments/3/runs/abc)"
    assert run_link("sqlite:///mlruns/mlflow.db", "3", "abc") == "`abc`"


def test_cli_errors_are_clear_and_exit_2(store, capsys):
    uri, _ = store
    assert main(["--experiment", "missing", "--tracking-uri", uri]) == 2
    assert "no MLflow experiment named 'missing'" in capsys.readouterr().err
    assert main(["--experiment", EXPERIMENT, "--tracking-uri", uri, "--alpha", "0.7"]) == 2
    assert "--alpha must be in (0, 0.5)" in capsys.readouterr().err
