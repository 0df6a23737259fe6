"""The MLflow tree: study tags for group-by, and one parent run per profile that nests its runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from src.tracking.run_tree import PARENT_TAG, log_analysis_run, parent_tags, profile_parent, study_tags


def test_study_tags_name_family_architecture_and_the_reasoning_components():
    tags = study_tags("qwen3_moe", "A+D", {"family": "qwen", "architecture": "moe"}, "paper")
    assert tags == {
        "model": "qwen3_moe",
        "strategy": "A+D",
        "family": "qwen",
        "architecture": "moe",
        "components": "abductive+deductive",
        "profile": "paper",
    }
    assert study_tags("minilm", "finetuned", {}, None)["components"] == "finetuned"
    assert "profile" not in study_tags("minilm", "finetuned", {}, None)


@pytest.fixture
def store(tmp_path: Path):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri)
    experiment_id = client.create_experiment("tree", artifact_location=(tmp_path / "artifacts").as_uri())
    return uri, client, experiment_id


def test_runs_of_a_profile_share_one_finished_parent_and_hand_runs_have_none(store):
    _, client, experiment_id = store
    first = profile_parent(client, experiment_id, "smoke")
    assert profile_parent(client, experiment_id, "smoke") == first  # found, not created again
    other = profile_parent(client, experiment_id, "paper")
    assert other != first
    parent = client.get_run(first)
    assert parent.info.status == "FINISHED" and parent.data.tags["kind"] == "profile"
    assert parent_tags(client, experiment_id, "smoke") == {PARENT_TAG: first}
    assert parent_tags(client, experiment_id, None) == {}
    assert len(client.search_runs([experiment_id])) == 2


def test_the_analysis_is_a_nested_run_carrying_the_report(store, tmp_path: Path):
    uri, client, experiment_id = store
    out = tmp_path / "reports"
    (out / "tables").mkdir(parents=True)
    (out / "report.html").write_text("<html>report</html>")
    (out / "tables" / "heatmap_f1.csv").write_text("configuration,dataset,f1\n")
    record = {
        "run_name": "analysis smoke",
        "params": {"resamples": 10},
        "tags": {"kind": "analysis", "profile": "smoke"},
    }
    run_id = log_analysis_run("tree", uri, record, out)
    run = client.get_run(run_id)
    assert run.data.tags["kind"] == "analysis"
    assert run.data.tags[PARENT_TAG] == profile_parent(client, experiment_id, "smoke")
    names = {a.path for a in client.list_artifacts(run_id)} | {a.path for a in client.list_artifacts(run_id, "tables")}
    assert {"report.html", "tables/heatmap_f1.csv"} <= names
