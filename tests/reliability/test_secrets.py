"""Secrets passed on the command line end up in no file: not Hydra's, not MLflow's, not the cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from src.tracking import store as tracking
from tests.helpers.openai_server import FaultServer, quoted_words_answer
from tests.helpers.paths import REPO_ROOT

HEADER_SECRET = "PLANTED123"
KEY_SECRET = "planted-key-XYZ"

APP = """
import hydra

@hydra.main(version_base=None, config_path=".", config_name="config")
def main(cfg):
    print("job ran")

main()
"""
CONFIG = """
model:
  options:
    base_url: http://127.0.0.1:1/v1
    api_key_env: TEMPGEN_TEST_KEY
    extra_headers:
      HTTP-Referer: https://example.org/tempgen
hydra:
  callbacks:
    redact_outputs:
      _target_: src.config.hydra_outputs.RedactHydraOutputs
"""


def files_containing(root: Path, needles: tuple[str, ...]) -> list[str]:
    hits = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            hits += [f"{path.relative_to(root)}: {needle}" for needle in needles if needle.encode() in data]
    return hits


def run_app(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "config.yaml").write_text(CONFIG)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TEMPGEN_TEST_KEY": KEY_SECRET}
    return subprocess.run(
        [sys.executable, str(tmp_path / "app.py"), *overrides],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_callback_redacts_the_files_a_real_hydra_run_writes(tmp_path):
    out = tmp_path / "out"
    done = run_app(
        tmp_path,
        f"+model.options.extra_headers.X-Secret={HEADER_SECRET}",
        f"+model.options.api_key={KEY_SECRET}",
        f"hydra.run.dir={out}",
    )
    assert done.returncode == 0 and "job ran" in done.stdout, done.stderr
    written = sorted(path.name for path in (out / ".hydra").iterdir())
    assert written == ["config.yaml", "hydra.yaml", "overrides.yaml"]
    assert files_containing(out, (HEADER_SECRET, KEY_SECRET, "example.org/tempgen")) == []
    config = (out / ".hydra" / "config.yaml").read_text()
    assert "X-Secret: '***REDACTED***'" in config and "api_key_env: TEMPGEN_TEST_KEY" in config
    overrides = (out / ".hydra" / "overrides.yaml").read_text()
    assert "+model.options.extra_headers.X-Secret=***REDACTED***" in overrides


def test_callback_redacts_a_sweep_folder_too(tmp_path):
    sweep = tmp_path / "sweep"
    done = run_app(
        tmp_path,
        "-m",
        f"+model.options.extra_headers.X-Secret={HEADER_SECRET}",
        f"hydra.sweep.dir={sweep}",
        "hydra.sweep.subdir=job",
    )
    assert done.returncode == 0, done.stderr
    assert (sweep / "multirun.yaml").is_file() and (sweep / "job" / ".hydra" / "config.yaml").is_file()
    assert files_containing(sweep, (HEADER_SECRET,)) == []


def test_config_secrets_collects_headers_secret_keys_and_the_named_key_variable(monkeypatch):
    monkeypatch.setenv("TEMPGEN_OWN_KEY", "own-key-value")
    monkeypatch.setenv("OPENROUTER_API_KEY", "router-key-value")
    config = {
        "model": {
            "options": {
                "api_key_env": "TEMPGEN_OWN_KEY",
                "token": "tok-1234",
                "extra_headers": {"X-A": "header-a", "X-Short": "ab"},
            }
        },
        "seed": 13,
    }
    assert set(tracking.config_secrets(config)) == {"own-key-value", "router-key-value", "tok-1234", "header-a"}


@pytest.mark.timeout(300)
def test_end_to_end_run_writes_no_planted_secret_anywhere(tmp_path):
    """``python -m src.run`` against the fault server, then every file it wrote is searched."""
    from src.data.schema import Record, Span, write_records

    text = "We met last week on Friday ."
    records = [
        Record("d1#s0", "d1", text, [Span(7, 16, "last week", "TIMEX"), Span(20, 26, "Friday", "TIMEX")], "t"),
        Record("d2#s0", "d2", "It rained today .", [Span(10, 15, "today", "TIMEX")], "t"),
    ]
    for split in ("base", "train"):
        write_records(tmp_path / "prepared" / "timex" / f"{split}.jsonl", records)
    env = {
        **os.environ,
        "TEMPGEN_TEST_KEY": KEY_SECRET,
        "PYTHONPATH": str(REPO_ROOT),
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
        "HF_HUB_OFFLINE": "1",
    }
    with FaultServer(answer=quoted_words_answer) as server:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "src.run",
                "model=qwen3_moe",
                "strategy=D",
                f"model.options.base_url={server.base_url}",
                "model.options.api_key_env=TEMPGEN_TEST_KEY",
                f"+model.options.extra_headers.X-Secret={HEADER_SECRET}",
                "tasks=[timex]",
                "datasets=[base]",
                "limit=2",
                f"hydra.run.dir={tmp_path / 'run'}",
                f"paths.cache={tmp_path / 'cache'}",
                f"paths.prepared={tmp_path / 'prepared'}",
                f"summary={tmp_path / 'summary.json'}",
            ],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=280,
            check=False,
        )
        requests, authorizations = sum(server.requests.values()), set(server.authorizations)
    assert done.returncode == 0, done.stderr[-3000:]
    assert requests >= 2 and authorizations == {f"Bearer {KEY_SECRET}"}  # the key went where it was told
    assert (tmp_path / "run" / ".hydra" / "config.yaml").is_file() and any((tmp_path / "cache").rglob("*.json"))
    assert files_containing(tmp_path, (HEADER_SECRET, KEY_SECRET)) == []
    assert HEADER_SECRET not in done.stdout + done.stderr and KEY_SECRET not in done.stdout + done.stderr


# -- issue 29: a credential in a URI (tracking store, base URL) is written nowhere

URI_TOKEN = "uri-token-PLANTED-42"
CREDENTIAL_URI = f"http://alice:{URI_TOKEN}@127.0.0.1:5999"


def test_a_tracked_training_writes_no_tracking_uri_into_its_checkpoint(tmp_path, monkeypatch):
    """The checkpoint folder is a DVC output (``dvc push`` uploads it): logging a training adds no
    file to it, so neither the tracking URI nor its credential can land there."""
    import mlflow

    from src.finetune.mlflow_logging import log_training, training_record
    from tests.helpers.finetune_data import train_config

    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow.set_experiment("secrets")
    out = tmp_path / "model"
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"weights")
    summary = {
        "schedule": {"steps": 1},
        "train_time_s": 1.0,
        "eval_time_s": 1.0,
        "best_val_f1": 0.5,
        "best_step": 1,
        "train_examples_per_s": 2.0,
        "val_metrics": {"f1": 0.5},
    }
    with mlflow.start_run():
        monkeypatch.setattr(mlflow, "get_tracking_uri", lambda: CREDENTIAL_URI + "/")
        log_training(training_record(summary, train_config(report_to="mlflow"), out, [], "m-timex-train"), out)
        monkeypatch.undo()
    mlflow.set_tracking_uri(previous)
    assert sorted(p.name for p in out.iterdir()) == ["model.safetensors"]
    assert files_containing(tmp_path, (URI_TOKEN,)) == []


def test_report_first_line_run_links_and_errors_show_no_credential():
    from src.report.prose import run_link
    from src.report.results import build_results

    assert run_link(CREDENTIAL_URI, "3", "abc") == "[abc](http://127.0.0.1:5999/#/experiments/3/runs/abc)"
    with pytest.raises(ValueError) as info:
        build_results([], {}, {}, CREDENTIAL_URI, "tempgen", "1")
    assert "at http://127.0.0.1:5999: no configuration run" in str(info.value) and URI_TOKEN not in str(info.value)
    writer = (REPO_ROOT / "src" / "report" / "prose.py").read_text()
    assert "`{redact_uris(results.tracking_uri)}`" in writer  # the provenance page's store line


def test_run_errors_about_a_uri_show_no_credential(tmp_path):
    from src.core.errors import ConfigError
    from src.core.values import http_url as check_http_url
    from src.tracking.health import StoreUnusable, check_store

    with pytest.raises(ConfigError) as info:
        check_http_url(f"http://alice:{URI_TOKEN}@:80/v1", "model.options.base_url")
    assert URI_TOKEN not in str(info.value) and "model.options.base_url" in str(info.value)
    corrupt = tmp_path / "mlflow.db"
    corrupt.write_bytes(b"no database")
    with pytest.raises(StoreUnusable) as info:
        check_store(f"sqlite:///{corrupt}", 1)
    assert "is not an SQLite database" in str(info.value)
    with pytest.raises(StoreUnusable) as info:
        check_store(f"gopher://alice:{URI_TOKEN}@host/x", 1)
    assert URI_TOKEN not in str(info.value) and "gopher://host/x" in str(info.value)


def test_a_credential_in_the_tracking_uri_moves_to_mlflows_basic_auth_variables(monkeypatch):
    """MLflow prints its tracking URI ("View run ... at: URI/#/...") and the run links use it: the
    URI MLflow is given has no credential; MLflow sends it as basic auth from its own variables."""
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", CREDENTIAL_URI + "/mlflow")
    assert tracking.tracking_uri() == "http://127.0.0.1:5999/mlflow"
    assert os.environ["MLFLOW_TRACKING_USERNAME"] == "alice" and os.environ["MLFLOW_TRACKING_PASSWORD"] == URI_TOKEN
    assert tracking.tracking_uri("https://bob:p%40ss@example.org") == "https://example.org"
    assert os.environ["MLFLOW_TRACKING_USERNAME"] == "alice"  # a variable already set is kept
    database = "postgresql://user:pw@db.example.org/mlflow"
    assert tracking.tracking_uri(database) == database  # SQLAlchemy needs it; MLflow prints no link for it


# -- issue 41: a credential in any URI of the configuration (a proxy taking basic auth)

PROXY_PASSWORD = "s3cret-PROXY-77"


def test_scrub_drops_keys_known_values_and_uri_user_info_in_one_pass():
    from src.redact import REDACTED, scrub

    tree = {
        "model": {"options": {"base_url": f"https://alice:{PROXY_PASSWORD}@proxy.example/v1", "api_key": "k-1"}},
        "overrides": [f"model.options.base_url=https://alice:{PROXY_PASSWORD}@proxy.example/v1", "seed=1"],
        "note": "header PLANTED123 here",
    }
    clean = scrub(tree, ("PLANTED123",))
    assert clean["model"]["options"] == {"base_url": "https://proxy.example/v1", "api_key": REDACTED}
    assert clean["overrides"] == ["model.options.base_url=https://proxy.example/v1", "seed=1"]
    assert clean["note"] == f"header {REDACTED} here"
    assert tracking.redact(tree, ("PLANTED123",)) == clean  # the tracking layer's redact is this scrubber


@pytest.mark.timeout(300)
def test_a_password_in_the_base_url_reaches_no_artifact_output_or_log(tmp_path):
    """``model.options.base_url=http://alice:PASSWORD@host/v1``: the run's MLflow artifacts (the
    resolved config included), params, Hydra's files, the cache, the summary and the log hold no
    trace of the password."""
    import mlflow

    from src.data.schema import Record, Span, write_records
    from src.tracking.history import read_history

    records = [Record("d1#s0", "d1", "It rained today .", [Span(10, 15, "today", "TIMEX")], "t")]
    for split in ("base", "train"):
        write_records(tmp_path / "prepared" / "timex" / f"{split}.jsonl", records)
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "MLFLOW_TRACKING_URI": store, "HF_HUB_OFFLINE": "1"}
    with FaultServer(answer=quoted_words_answer) as server:
        base_url = server.base_url.replace("http://", f"http://alice:{PROXY_PASSWORD}@")
        done = subprocess.run(
            [sys.executable, "-m", "src.run", "model=qwen3_moe", "strategy=D", f"model.options.base_url={base_url}",
             "tasks=[timex]", "datasets=[base]", "limit=1", f"hydra.run.dir={tmp_path / 'run'}",
             f"paths.cache={tmp_path / 'cache'}", f"paths.prepared={tmp_path / 'prepared'}",
             f"summary={tmp_path / 'outputs' / 'summary.json'}"],
            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=280, check=False,
        )  # fmt: skip
        sent = server.request_count
    assert done.returncode == 0, done.stderr[-3000:]
    assert sent == 1  # the run did talk to the proxy with the credential
    run_id = read_history(tmp_path / "outputs" / "summary.json")["run_id"]
    client = mlflow.MlflowClient(tracking_uri=store)
    artifacts = Path(client.download_artifacts(run_id, "", str(tmp_path / "downloaded")))
    resolved = (artifacts / "config" / "resolved.json").read_text()
    assert "http://127.0.0.1:" in resolved  # the URL is there, without its user-info
    run = client.get_run(run_id)
    written = json.dumps({"params": run.data.params, "tags": run.data.tags})
    assert files_containing(tmp_path, (PROXY_PASSWORD,)) == []
    assert PROXY_PASSWORD not in written and PROXY_PASSWORD not in done.stdout + done.stderr
