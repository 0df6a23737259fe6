"""``python -m src.run`` end to end against a loopback OpenAI-compatible server.

Checks the MLflow run (params, metrics with hand-computed values, artifacts), the DVC
summary, the cache (a re-run sends no request), failure reporting and resume, and that
the API key never appears in anything the run writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from src.data.schema import Record, Span, write_records
from src.tracking.keys import KEY_TAG
from tests.helpers.openai_server import FakeOpenAIServer, last_user_message

ROOT = Path(__file__).resolve().parents[1]
SECRET = "fake-openrouter-key-never-logged-0123456789"


def _record(rid: str, text: str, spans: list[tuple[str, str]]) -> Record:
    found = []
    for string, label in spans:
        start = text.index(string)
        found.append(Span(start, start + len(string), string, label))
    return Record(rid, rid.split("#")[0], text, sorted(found), "test")


TIMEX = [
    _record("d1#s0", "The meeting was held on Friday .", [("Friday", "TIMEX")]),
    _record("d2#s0", "Sales rose last week and again today .", [("last week", "TIMEX"), ("today", "TIMEX")]),
    _record("d3#s0", "He left in 1998 .", [("1998", "TIMEX")]),
]
COMP = [
    _record("d4#s0", "They met on Monday and signed .", [("Monday", "TIMEX"), ("met", "EVENT"), ("signed", "EVENT")])
]
ANSWERS = {  # the last text of the prompt -> the canned model answer
    "The meeting was held on Friday .": '```json\n["Friday"]\n```',
    "Sales rose last week and again today .": '["week", "today"]',
    "He left in 1998 .": "I could not find anything, sorry",
    "They met on Monday and signed .": '{"timex": ["Monday"], "eventx": ["met"]}',
}


def _answer(body: dict) -> str:
    message = last_user_message(body)
    return next(answer for text, answer in ANSWERS.items() if message.rstrip().endswith(text))


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    for task, records in (("timex", TIMEX), ("comp", COMP)):
        write_records(tmp_path / "prepared" / task / "base.jsonl", records)
        write_records(tmp_path / "prepared" / task / "train.jsonl", records)
    return tmp_path


def _run(workspace: Path, server: FakeOpenAIServer, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["OPENROUTER_API_KEY"] = SECRET
    overrides = [
        "model=qwen3_moe",
        "strategy=D",
        "dimension=base",
        "tasks=[timex,comp]",
        f"model.options.base_url={server.base_url}",
        "model.options.max_retries=1",
        "model.options.backoff_base_s=0.01",
        "model.options.backoff_max_s=0.02",
        f"paths.prepared={workspace / 'prepared'}",
        f"paths.cache={workspace / 'cache'}",
        f"mlflow.tracking_uri=sqlite:///{workspace / 'mlflow.db'}",
        f"summary={workspace / 'summary.json'}",
        f"hydra.run.dir={workspace / 'outputs'}",
        "scoring.bootstrap_resamples=200",
        *extra,
    ]
    return subprocess.run(
        [sys.executable, "-m", "src.run", *overrides], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def _mlflow_runs(workspace: Path):
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{workspace / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tempgen")
    return client, client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])


def _files_under(path: Path):
    return [p for p in path.rglob("*") if p.is_file()]


def test_run_logs_scores_artifacts_and_caches(workspace: Path):
    with FakeOpenAIServer(answer=_answer) as server:
        done = _run(workspace, server)
        assert done.returncode == 0, done.stderr[-3000:]
        assert server.request_count == 4
        # the end-of-run verdict: F1 per dataset, and the parse failures over the 5% threshold named
        output = done.stdout + done.stderr
        assert "timex/base: F1 0.714 (3 instances)" in output and "comp/base: F1 0.800 (1 instance)" in output
        assert "warning: answers not to trust (warn_rate 0.05); check these datasets:" in output
        assert "parse failures above 5%: timex/base 33.3%" in output and "comp/base 0.0%" not in output
        # a loopback server never gets the OpenRouter key (src.backends.openai_backend: keys go to their own host)
        assert all(auth == "Bearer EMPTY" for auth in server.authorizations)

        client, runs = _mlflow_runs(workspace)
        assert len(runs) == 1
        run = runs[0]
        assert run.info.run_name == "qwen3_moe-D" and run.info.status == "FINISHED"
        params = run.data.params
        assert params["model_id"] == "qwen/qwen3-235b-a22b-2507"
        assert params["architecture"] == "moe" and params["strategy"] == "D" and params["k"] == "0"
        assert params["data_version"].startswith("raw:") and params["git_commit"]
        metrics = run.data.metrics
        # timex: matched 1 + (0.5 + 1) + 0 = 2.5 of 3 predictions and 4 gold spans
        assert metrics["timex.base.precision"] == pytest.approx(2.5 / 3)
        assert metrics["timex.base.recall"] == pytest.approx(2.5 / 4)
        assert metrics["timex.base.f1"] == pytest.approx(5 / 7)
        assert metrics["timex.base.strict_f1"] == pytest.approx(2 * 2 / 7)
        assert metrics["timex.base.parse_failure_rate"] == pytest.approx(1 / 3)
        assert metrics["timex.base.f1_ci_low"] <= metrics["timex.base.f1"] <= metrics["timex.base.f1_ci_high"]
        # comp: Monday and met found, signed missed
        assert metrics["comp.base.f1"] == pytest.approx(2 * 2 / 5)
        assert metrics["comp.base.TIMEX.f1"] == pytest.approx(1.0)
        assert metrics["comp.base.EVENT.recall"] == pytest.approx(0.5)

        artifacts = Path(client.download_artifacts(run.info.run_id, "", str(workspace / "downloaded")))
        rows = [json.loads(line) for line in (artifacts / "predictions/timex/base.jsonl").read_text().splitlines()]
        assert [r["id"] for r in rows] == ["d1#s0", "d2#s0", "d3#s0"]
        assert rows[2]["parse_ok"] is False and rows[2]["raw_output"] == ANSWERS["He left in 1998 ."]
        boot = json.loads((artifacts / "bootstrap/timex/base.json").read_text())
        assert boot["stats"]["lcs"] == [[1.0, 1.0, 1.0], [1.5, 2.0, 2.0], [0.0, 0.0, 1.0]]
        assert len(boot["bootstrap_f1"]) == 200
        assert (artifacts / "config/resolved.json").exists() and (artifacts / "usage.json").exists()

        summary = json.loads((workspace / "summary.json").read_text())
        assert summary["complete"] and summary["key"] == run.data.tags[KEY_TAG] and "run_id" not in summary
        history = json.loads((workspace / "summary.history.json").read_text())  # beside: not a DVC output
        assert history["run_id"] == run.info.run_id and history["key"] == summary["key"]
        assert summary["metrics"]["timex"]["base"]["f1"] == pytest.approx(5 / 7, abs=1e-6)
        assert summary["run_name"] == "qwen3_moe-D" and summary["kind"] == "prompted"

        again = _run(workspace, server)
        assert again.returncode == 0, again.stderr[-3000:]
        assert server.request_count == 4, "a finished configuration must be answered from the cache"

    leaked = [str(p) for p in _files_under(workspace) if SECRET.encode() in p.read_bytes()]
    assert not leaked, f"the API key was written to {leaked}"


def test_every_dataset_of_a_configuration_is_generated_in_one_backend_call(workspace: Path):
    """The 3 timex and the 1 comp request are in flight together: no backend waits for the end of
    one dataset before starting the next (the scores stay those of the run above)."""
    with FakeOpenAIServer(answer=_answer, latency_s=0.3) as server:
        done = _run(workspace, server)
        assert done.returncode == 0, done.stderr[-3000:]
        assert server.request_count == 4 and server.max_in_flight == 4
    _, runs = _mlflow_runs(workspace)
    assert runs[-1].data.metrics["timex.base.f1"] == pytest.approx(5 / 7)
    assert runs[-1].data.metrics["comp.base.f1"] == pytest.approx(2 * 2 / 5)


def test_a_span_repeated_in_a_looping_answer_ends_it_when_the_run_says_so(workspace: Path):
    looping = {**ANSWERS, "Sales rose last week and again today .": '["today", "last", "today", "last week"]'}

    def answer(body: dict) -> str:
        message = last_user_message(body)
        return next(text for key, text in looping.items() if message.rstrip().endswith(key))

    scores = {}
    with FakeOpenAIServer(answer=answer) as server:
        for stop in ("true", "false"):
            done = _run(workspace, server, "tasks=[timex]", f"generation.stop_at_repeated_span={stop}")
            assert done.returncode == 0, done.stderr[-3000:]
            scores[stop] = json.loads((workspace / "summary.json").read_text())["metrics"]["timex"]["base"]
        assert server.request_count == 6  # the option is part of the cache key
    _, runs = _mlflow_runs(workspace)
    assert [run.data.params["stop_at_repeated_span"] for run in runs] == ["True", "False"]
    # stopped: Friday, today, last (matched 1 + 1 + 0.5 of 3); free: also "last week" (3 of 4)
    assert scores["true"]["precision"] == pytest.approx(2.5 / 3) and scores["true"]["recall"] == pytest.approx(2.5 / 4)
    assert scores["false"]["precision"] == pytest.approx(3 / 4) and scores["false"]["recall"] == pytest.approx(3 / 4)


def test_failed_requests_are_reported_and_a_rerun_completes_them(workspace: Path):
    with FakeOpenAIServer(answer=_answer) as server:
        server.inject("He left in", status=500, times=None)
        failed = _run(workspace, server, "tasks=[timex]")
        assert failed.returncode == 1
        output = failed.stdout + failed.stderr
        assert "d3#s0" in output and "HTTP 500" in output  # the id and its real cause
        assert "timex/base: not scored (1 of 3 requests failed)" in output
        _, runs = _mlflow_runs(workspace)
        assert runs[-1].info.status == "FAILED"
        assert "timex.base.f1" not in runs[-1].data.metrics  # never scored on a subset
        assert json.loads((workspace / "summary.json").read_text())["complete"] is False

        server.faults.clear()
        server.reset_counts()
        done = _run(workspace, server, "tasks=[timex]")
        assert done.returncode == 0, done.stderr[-3000:]
        assert server.request_count == 1, "only the failed request is sent again"
        _, runs = _mlflow_runs(workspace)
        assert runs[-1].data.metrics["timex.base.f1"] == pytest.approx(5 / 7)


def test_missing_api_key_fails_before_any_request(workspace: Path):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENROUTER_API_KEY", "MLFLOW_TRACKING_URI")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "src.run",
            "model=qwen3_moe",
            "strategy=I",
            "limit=1",
            "dimension=base",
            f"paths.prepared={workspace / 'prepared'}",
            "tasks=[timex]",
            f"paths.cache={workspace / 'cache'}",
            f"mlflow.tracking_uri=sqlite:///{workspace / 'mlflow.db'}",
            f"hydra.run.dir={workspace / 'outputs'}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0
    assert "OPENROUTER_API_KEY" in done.stderr
    assert not (workspace / "mlflow.db").exists() or "qwen3_moe-I" not in (workspace / "mlflow.db").read_bytes().decode(
        "latin-1"
    )


def test_each_dataset_is_an_mlflow_input_with_its_dvc_hash(workspace: Path):
    import hashlib

    with FakeOpenAIServer(answer=_answer) as server:
        done = _run(workspace, server)
        assert done.returncode == 0, done.stderr[-3000:]
    _, runs = _mlflow_runs(workspace)
    inputs = {i.dataset.name: i.dataset for i in runs[-1].inputs.dataset_inputs}
    assert set(inputs) == {"timex/base", "comp/base"}
    expected = hashlib.md5((workspace / "prepared/timex/base.jsonl").read_bytes()).hexdigest()
    assert inputs["timex/base"].digest == expected
    assert "prepared/timex/base.jsonl" in inputs["timex/base"].source
    assert runs[-1].data.metrics["timex.base.truncated_rate"] == 0.0


def test_max_input_words_leaves_out_longer_inputs_before_the_limit_subset(tmp_path: Path):
    from src.runs.configure import planned_records

    path = tmp_path / "len.jsonl"
    texts = {"short": "One two three .", "middle": "One two three four five six .", "long": "word " * 40 + "."}
    write_records(path, [_record(f"{rid}#s0", text, []) for rid, text in texts.items()])
    assert [r.id for r in planned_records(path, None, 13, 7)] == ["short#s0", "middle#s0"]
    assert len(planned_records(path, None, 13, None)) == 3
    assert [r.id for r in planned_records(path, 1, 13, 4)] == ["short#s0"]


def _generation(**given):
    from src.config.schema import Generation

    base = {"temperature": 0.0, "seed": 0, "constrained": False, "spans_from_input": False}
    base.update(stop_at_repeated_span=False, max_tokens=None, max_tokens_document=None, max_tokens_reasoning=None)
    return Generation.from_mapping({**base, **given})


def test_documents_have_their_own_generation_budget():
    from src.prompts import get_strategy
    from src.runs.prompted import generation_budget

    strategy = get_strategy("A")
    generation = _generation(max_tokens=48, max_tokens_document=None)
    assert generation_budget(generation, strategy, "base") == 48
    assert generation_budget(generation, strategy, "len") == strategy.max_tokens_document
    generation = _generation(max_tokens_document=160)
    assert generation_budget(generation, strategy, "len") == 160
    assert generation_budget(generation, strategy, "t2c") == strategy.max_tokens


def test_abductive_answers_get_the_reasoning_allowance_on_top():
    """A bounded reasoning step of 40 characters can cost 40 tokens ("1. 1. 1. ..."): with one
    budget for everything, 5 of 1,040 A / A+D answers were cut before their spans."""
    from src.prompts import get_strategy
    from src.runs.prompted import generation_budget

    generation = _generation(max_tokens=64, max_tokens_document=160, max_tokens_reasoning=88)
    assert generation_budget(generation, get_strategy("A"), "base") == 64 + 88
    assert generation_budget(generation, get_strategy("A+D+I"), "len") == 160 + 88
    assert generation_budget(generation, get_strategy("D+I"), "base") == 64
    assert generation_budget(generation, get_strategy("I"), "len") == 160
    generation = _generation(max_tokens=64, max_tokens_reasoning=None)
    assert generation_budget(generation, get_strategy("A"), "base") == 64


def test_too_few_exemplars_fail_before_a_run_is_opened(workspace: Path):
    """k=5 exemplars from a 3-sentence train split: one line, exit 2, no MLflow run (not a traceback inside one)."""
    with FakeOpenAIServer(answer=_answer) as server:
        done = _run(workspace, server, "strategy=I", "tasks=[timex]")
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert "timex exemplars" in done.stderr and server.request_count == 0
    assert not (workspace / "mlflow.db").exists()


def test_usage_counts_sent_cached_identical_and_retried_requests_apart(workspace: Path):
    """An identical prompt is sent and counted once, a retry is an attempt, and a rerun that sends
    nothing reports zero new cost with the cached answers' cost apart (it used to report it again)."""
    from src.backends.base import GenerationResult

    duplicate = _record("d5#s0", "He left in 1998 .", [("1998", "TIMEX")])
    write_records(workspace / "prepared" / "timex" / "base.jsonl", [*TIMEX, duplicate])
    with FakeOpenAIServer(answer=_answer) as server:
        server.inject("Friday", status=500, times=1)
        done = _run(workspace, server, "tasks=[timex]")
        assert done.returncode == 0, done.stderr[-3000:]
        assert server.request_count == 4  # 3 distinct prompts, one of them retried once
        # the server's cost: 1e-6 per word of prompt and answer, for each answered prompt
        words = {last_user_message(b): sum(len(m["content"].split()) for m in b["messages"]) for b in server.bodies}
        cost = sum(1e-6 * (prompt + len(_answer_for(text).split())) for text, prompt in words.items())
        prompt_tokens = sum(words.values())
        client, runs = _mlflow_runs(workspace)
        first = _usage(client, runs[-1], workspace / "first")["timex/base"]
        retried = 1 if "attempts" in GenerationResult.__dataclass_fields__ else 0  # a backend that says so
        assert first["requests"] == 4 and first["duplicates"] == 1
        assert (first["sent"], first["cached"], first["failed"]) == (3, 0, 0)
        assert (first["attempts"], first["retried"]) == (3 + retried, retried)
        assert first["prompt_tokens"] == prompt_tokens and first["cost"] == pytest.approx(cost)
        assert first["cached_cost"] == 0
        # the run's history file (beside the summary DVC tracks) carries its total, which the report sums
        total = json.loads((workspace / "summary.history.json").read_text())["usage"]
        assert (total["requests"], total["sent"], total["cost"]) == (4, 3, pytest.approx(cost, abs=1e-6))
        assert "latency_s" not in total

        again = _run(workspace, server, "tasks=[timex]")
        assert again.returncode == 0, again.stderr[-3000:]
        assert server.request_count == 4
        client, runs = _mlflow_runs(workspace)
        second = _usage(client, runs[-1], workspace / "second")["timex/base"]
        assert (second["sent"], second["cached"], second["duplicates"], second["attempts"]) == (0, 3, 1, 0)
        assert second["cost"] == 0 and second["prompt_tokens"] == 0
        assert second["cached_cost"] == pytest.approx(cost) and second["cached_prompt_tokens"] == prompt_tokens
        assert runs[-1].data.metrics["timex.base.usage.cost"] == 0
        assert runs[-1].data.metrics["timex.base.usage.cached_cost"] == pytest.approx(cost)
        total = json.loads((workspace / "summary.history.json").read_text())["usage"]
        assert (total["sent"], total["cost"], total["cached"]) == (0, 0, 3)


def _answer_for(prompt: str) -> str:
    return next(answer for text, answer in ANSWERS.items() if prompt.rstrip().endswith(text))


def _usage(client, run, into: Path) -> dict:
    into.mkdir()
    return json.loads(Path(client.download_artifacts(run.info.run_id, "usage.json", str(into))).read_text())
