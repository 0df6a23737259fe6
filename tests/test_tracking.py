"""Secrets never reach a config dump; the data version and the local store are well defined."""

from __future__ import annotations

from pathlib import Path

from src import tracking


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
