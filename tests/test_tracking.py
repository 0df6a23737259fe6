"""Secrets never reach a config dump; the data version and the local store are well defined."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from src.tracking import store as tracking


def test_redact_hides_secret_keys_and_known_values_but_keeps_token_counts():
    config = {
        "model": {"options": {"api_key": "sk-live-123", "api_key_env": "OPENROUTER_API_KEY", "base_url": "x"}},
        "headers": {"Authorization": "Bearer sk-live-123"},
        "usage": {"max_tokens": 512, "prompt_tokens": 10},
        "note": "called with sk-live-123 inside",
        "list": ["sk-live-123", 3],
    }
    out = tracking.redact(config, ("sk-live-123",))
    assert out["model"]["options"]["api_key"] == tracking.REDACTED
    assert out["model"]["options"]["api_key_env"] == "OPENROUTER_API_KEY"
    assert out["headers"]["Authorization"] == tracking.REDACTED
    assert out["usage"] == {"max_tokens": 512, "prompt_tokens": 10}
    assert "sk-live-123" not in repr(out)
    assert config["model"]["options"]["api_key"] == "sk-live-123"  # the input is not modified


def test_tracking_uri_prefers_explicit_then_environment(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert tracking.tracking_uri("sqlite:///x.db") == "sqlite:///x.db"
    assert tracking.tracking_uri() == "http://127.0.0.1:5000"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert tracking.tracking_uri() == f"sqlite:///{tracking.LOCAL_STORE / 'mlflow.db'}"


def test_data_version_changes_with_the_dataset_bytes(tmp_path: Path):
    a = tmp_path / "base.jsonl"
    a.write_text('{"id": "1"}\n')
    first = tracking.data_version([a])
    assert first.startswith("raw:") and "/datasets:" in first
    a.write_text('{"id": "2"}\n')
    assert tracking.data_version([a]) != first


def test_git_commit_names_a_commit():
    commit = tracking.git_commit()
    assert commit == "unknown" or len(commit.split("-")[0]) == 40


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One fresh SQLite store for this module (creating one costs seconds)."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"
    client = MlflowClient(uri)  # not start_experiment: that sets the process-wide tracking URI
    return client, client.create_experiment("tracking-tests")


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_close_stale_runs_fails_only_runs_whose_owner_is_gone(store):
    client, experiment_id = store
    here = socket.gethostname()

    def running(name: str, tags: dict) -> str:
        return client.create_run(experiment_id, run_name=name, tags=tags).info.run_id

    no_owner = running("cfg", {})
    dead_here = running("cfg", {tracking.PID_TAG: str(dead_pid()), tracking.HOST_TAG: here})
    alive_here = running("cfg", tracking.run_owner_tags())
    elsewhere = running("cfg", {tracking.PID_TAG: str(dead_pid()), tracking.HOST_TAG: "another-host"})
    other_name = running("other-cfg", {})
    finished = running("cfg", {})
    client.set_terminated(finished, "FINISHED")

    closed = tracking.close_stale_runs(experiment_id, "cfg", client)

    assert sorted(closed) == sorted([no_owner, dead_here])
    status = {
        run_id: client.get_run(run_id).info.status
        for run_id in (no_owner, dead_here, alive_here, elsewhere, other_name, finished)
    }
    assert status == {
        no_owner: "FAILED",
        dead_here: "FAILED",
        alive_here: "RUNNING",
        elsewhere: "RUNNING",
        other_name: "RUNNING",
        finished: "FINISHED",
    }
    assert client.get_run(no_owner).data.tags["tempgen.closed_as_stale"] == "true"
    assert tracking.close_stale_runs(experiment_id, "cfg", client) == []  # idempotent


def test_run_owner_tags_name_this_process():
    tags = tracking.run_owner_tags()
    assert tags == {tracking.PID_TAG: str(os.getpid()), tracking.HOST_TAG: socket.gethostname()}


def test_start_experiment_tolerates_a_concurrent_create(store):
    """Another process creates the experiment between our lookup and our create."""
    client, _ = store

    class LateLookup:  # the real client, except that the first lookup misses
        def __init__(self):
            self.lookups = 0

        def get_experiment_by_name(self, name):
            self.lookups += 1
            return None if self.lookups == 1 else client.get_experiment_by_name(name)

        def create_experiment(self, name, artifact_location=None, tags=None):
            return client.create_experiment(name, artifact_location=artifact_location, tags=tags)

    client.create_experiment("raced")
    experiment_id = tracking._get_or_create_experiment(LateLookup(), "raced", None)
    assert experiment_id == client.get_experiment_by_name("raced").experiment_id


def test_the_experiment_opens_on_its_runs_in_the_mlflow_ui(store):
    """MLflow 3's UI opens an experiment without a kind on the GenAI traces overview (empty here):
    a new experiment, and one of a store from before, say they hold model-development runs."""
    client, _ = store
    fresh = tracking._get_or_create_experiment(client, "kind-fresh", None)
    older = client.create_experiment("kind-older")  # as a store written before the tag
    assert tracking.EXPERIMENT_KIND_TAG not in client.get_experiment(older).tags
    assert tracking._get_or_create_experiment(client, "kind-older", None) == older
    for experiment_id in (fresh, older):
        tags = client.get_experiment(experiment_id).tags
        assert tags[tracking.EXPERIMENT_KIND_TAG] == "custom_model_development"


def test_store_lock_sits_beside_a_sqlite_file_and_in_tmp_otherwise(tmp_path):
    assert tracking.store_lock_path(f"sqlite:///{tmp_path / 'm.db'}") == tmp_path / "m.db.lock"
    remote = tracking.store_lock_path("http://127.0.0.1:5000")
    assert remote.parent == Path(tempfile.gettempdir()) and remote != tracking.store_lock_path("http://other:5000")


def test_a_store_mlflow_refuses_is_one_clear_error(tmp_path, monkeypatch):
    """A ``file:`` store used to end the run with MLflow's traceback; now it is one line."""
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    from src.tracking.store import StoreError, start_experiment

    uri = (tmp_path / "mlruns").as_uri()
    with pytest.raises(StoreError, match=r"tracking store 'file://.*mlruns': The filesystem tracking backend") as info:
        start_experiment("tempgen", uri)
    assert "\n" not in str(info.value)
