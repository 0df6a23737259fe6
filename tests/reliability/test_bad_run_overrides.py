"""Every bad start of ``python -m src.run`` stops before a request or an MLflow run (issue 29, item 4).

Each override below is composed with Hydra and run in-process against a loopback server: the
run must raise a one-line error naming the key (exit code 2 in ``main``), send no request and
create no MLflow store. A few run as real processes, where a traceback would be printed.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from src.config.overrides import unknown_choice_error
from src.config.schema import RunConfig
from src.core.errors import ConfigError
from src.core.locate import conf_dir
from src.data.schema import write_records
from src.runs.lifecycle import run as run_typed
from src.tracking.store import StoreError
from tests.helpers.openai_server import FakeOpenAIServer
from tests.helpers.paths import REPO_ROOT
from tests.helpers.resumable_run import (
    answer as _answer,
    records as _records,
)

CONF = conf_dir()


def run(cfg) -> int:
    """What ``main`` does with a composition: type it (the checks), then run it."""
    return run_typed(RunConfig.from_hydra(cfg))


# (override(s), what the one-line error must contain)
BAD = [
    ("seed=-1", "seed: expected an integer from 0 to 4,294,967,295, got -1"),
    ("seed=4294967296", "seed: expected an integer from 0 to 4,294,967,295"),
    ("seed=abc", "seed: expected an integer from 0 to"),
    ("generation.seed=-5", "generation.seed: expected an integer from 0 to"),
    ("scoring.bootstrap_seed=-1", "scoring.bootstrap_seed: expected an integer from 0 to"),
    ("limit=0", "limit: expected a positive integer or null, got 0"),
    ("limit=-3", "limit: expected a non-negative integer or null, got -3"),
    ("limit=1.5", "limit: expected an integer or null"),
    ("limit=abc", "limit: expected an integer or null, got 'abc'"),
    ("max_input_words=-1", "max_input_words: expected a non-negative integer or null, got -1"),
    ("max_input_words=2", "max_input_words: no input of "),  # no input is that short
    ("generation.max_tokens=0", "generation.max_tokens: expected a positive integer or null, got 0"),
    ("generation.max_tokens=-1", "generation.max_tokens: expected a non-negative integer or null"),
    ("generation.max_tokens_document=0", "generation.max_tokens_document: expected a positive integer"),
    ("generation.max_tokens_reasoning=x", "generation.max_tokens_reasoning: expected an integer or null"),
    ("generation.max_tokens_reasoning=-5", "generation.max_tokens_reasoning: expected a non-negative integer"),
    ("generation.temperature=-1", "generation.temperature: expected a number >= 0"),
    ("tasks=timex", "tasks: expected a list such as tasks=[timex], got 'timex'"),
    ("datasets=base", "datasets: expected a list such as datasets=[base], got 'base'"),
    ("scoring.variants=released", "scoring.variants: expected a list such as scoring.variants=[released]"),
    ("tasks=[nope]", "tasks: unknown task 'nope'"),
    ("datasets=[nope]", "datasets: unknown ['nope']; the study's datasets are"),
    ("prompt.answer_format=nope", "prompt.answer_format: 'nope' is not one of ('compact', 'study')"),
    ("generation.stop_at_repeated_span=yes", "generation.stop_at_repeated_span: expected true or false, got 'yes'"),
    ("generation.constrained=1", "generation.constrained: expected true or false, got 1"),
    ("budget.max_cost_usd=-1", "budget.max_cost_usd: expected a number of USD >= 0 or null, got -1"),
    ("budget.max_requests=abc", "budget.max_requests: expected an integer >= 0 or null, got 'abc'"),
    ("budget.ledger=''", "budget.ledger: expected a name or null, got ''"),
    ("model.options.base_url=not-a-url", "model.options.base_url: expected an http:// or https:// URL with a host"),
    ("model.options.base_url=ftp://127.0.0.1/v1", "model.options.base_url: expected an http:// or https:// URL"),
    ("model.options.base_url=http://127.0.0.1:abc/v1", "model.options.base_url: expected an http:// or https://"),
    (
        "model.options.base_url=https://api.example.org/v1 model.options.api_key_env=TEMPGEN_UNSET_KEY_VARIABLE",
        "no API key for https://api.example.org/v1: set the environment variable TEMPGEN_UNSET_KEY_VARIABLE",
    ),
    ("model.options.api_key_env=''", "model.options.api_key_env: expected the name of an environment variable"),
    ("model.options.max_retries=-1", "model.options.max_retries: expected an integer >= 0, got -1"),
    ("model.options.max_concurrency=0", "model.options.max_concurrency: expected an integer >= 1, got 0"),
    ("model.options.timeout_s=abc", "model.options.timeout_s: expected a number >= 0.001, got 'abc'"),
    ("model.options.backoff_max_s=-2", "model.options.backoff_max_s: expected a number >= 0"),
    ("model.options.on_model_mismatch=ignore", "model.options.on_model_mismatch: expected warn or fail"),
    ("warn_rate=2", "warn_rate: expected a number from 0 to 1, got 2"),
    ("mlflow.lock_wait_s=-1", "mlflow.lock_wait_s: expected a number of seconds from 0 to 86400"),
    ("mlflow.tracking_uri=not-a-store", "mlflow.tracking_uri: 'not-a-store' is no tracking store"),
    ("scoring.bootstrap_resamples=0", "scoring.bootstrap_resamples: expected an integer in [1, 1000000]"),
    ("prompt.form=nope", "prompt.form: 'nope' is not one of"),
]


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    for split in ("base", "train"):
        write_records(tmp_path / "prepared" / "timex" / f"{split}.jsonl", _records())
    return tmp_path


def overrides(workspace: Path, server: FakeOpenAIServer) -> list[str]:
    return [
        "model=qwen25_7b",
        "strategy=D",
        "dimension=base",
        "tasks=[timex]",
        f"model.options.base_url={server.base_url}",
        f"paths.prepared={workspace / 'prepared'}",
        f"paths.cache={workspace / 'cache'}",
        f"mlflow.tracking_uri=sqlite:///{workspace / 'mlflow.db'}",
    ]


def first_error(workspace: Path, server: FakeOpenAIServer, override: str) -> str:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[*overrides(workspace, server), *override.split()])
    with pytest.raises((ConfigError, StoreError)) as info:
        run(cfg)
    return str(info.value)


def test_more_than_25_bad_overrides_are_covered():
    assert len(BAD) >= 25 and len({override for override, _ in BAD}) == len(BAD)


@pytest.mark.parametrize("override, message", BAD, ids=[override for override, _ in BAD])
def test_a_bad_value_stops_before_any_request_or_run(workspace: Path, monkeypatch, override: str, message: str):
    monkeypatch.delenv("TEMPGEN_UNSET_KEY_VARIABLE", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with FakeOpenAIServer(answer=_answer) as server:
        error = first_error(workspace, server, override)
        assert server.request_count == 0
    assert message in error and "\n" not in error, error
    assert not (workspace / "mlflow.db").exists() and not (workspace / "cache").exists()


def test_the_key_variable_of_the_model_does_not_hide_a_bad_url(workspace: Path, monkeypatch):
    """With a key variable of the model's own, ``base_url=not-a-url`` is still named (it used to be
    tried and fail as a connection error on every request)."""
    monkeypatch.setenv("TEMPGEN_OWN_KEY", "own-key-1234")
    with FakeOpenAIServer(answer=_answer) as server:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose(
                "config",
                overrides=[
                    *overrides(workspace, server),
                    "model.options.api_key_env=TEMPGEN_OWN_KEY",
                    "model.options.base_url=not-a-url",
                ],
            )
        with pytest.raises(ConfigError, match="model.options.base_url: expected an http:// or https:// URL"):
            run(cfg)
        assert server.request_count == 0


def test_a_locked_store_is_named_before_any_request(workspace: Path):
    database = workspace / "mlflow.db"
    holder = sqlite3.connect(database, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with FakeOpenAIServer(answer=_answer) as server:
            error = first_error(workspace, server, "mlflow.lock_wait_s=0.2")
            assert server.request_count == 0
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert f"tracking store sqlite:///{database}: the database is locked by another process (waited 0.2 s)" in error


@pytest.mark.parametrize(
    "argv, message",
    [
        (["model=nope"], "model: unknown 'nope'; choose one of gpt41, llama3_8b, llama4_maverick, "),
        (["strategy=Z"], "strategy: unknown 'Z'; choose one of A, A+D, A+D+I, A+I, D, D+I, I"),
        (["dimension=x"], "dimension: unknown 'x'; choose one of all, base, "),
        (["seed=1", "+condition=nope"], "condition: unknown 'nope'; choose one of "),
    ],
)
def test_an_unknown_group_choice_lists_the_valid_ones_on_one_line(argv: list[str], message: str):
    error = unknown_choice_error(argv)
    assert error is not None and error.startswith(message) and "\n" not in error
    assert unknown_choice_error(["model=qwen25_7b", "strategy=A+D+I", "condition=null"]) is None


def test_a_multirun_sweep_is_checked_value_by_value():
    """``-m model=a,b`` names two valid models (the launcher tests' sweep once failed here)."""
    assert unknown_choice_error(["-m", "model=qwen25_7b,llama3_8b", "strategy=I,D+I,A+D+I"]) is None
    assert unknown_choice_error(["-m", "strategy=glob(*)", "model=choice(qwen25_7b,llama3_8b)"]) is None
    error = unknown_choice_error(["-m", "model=qwen25_7b,nope"])
    assert error is not None and error.startswith("model: unknown 'nope'; choose one of gpt41, llama3_8b")


@pytest.mark.parametrize(
    "override, message",
    [
        ("model=nope", "error: model: unknown 'nope'; choose one of "),
        ("seed=-1", "error: seed: expected an integer from 0 to 4,294,967,295, got -1"),
        ("tasks=timex", "error: tasks: expected a list such as tasks=[timex], got 'timex'"),
    ],
)
def test_a_real_process_prints_one_line_and_exits_2(workspace: Path, override: str, message: str):
    with FakeOpenAIServer(answer=_answer) as server:
        done = subprocess.run(
            [sys.executable, "-m", "src.run", *overrides(workspace, server), override],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert server.request_count == 0
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.splitlines() == [done.stderr.strip()] and done.stderr.startswith(message), done.stderr
    assert not (workspace / "mlflow.db").exists()
