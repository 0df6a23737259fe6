"""A cut-down paper profile through ``dvc repro`` against a self-hosted OpenAI-compatible server.

llama.cpp's server (``python -m llama_cpp.server``, the embedded GGUF on 127.0.0.1) stands in for
vLLM or a provider, chosen by the one endpoint setting (``sweep.provider: custom`` and
``$TEMPGEN_BASE_URL``), with no model file edited. The server accepts only ``json_object``
schemas, so the study condition's strict schema exercises the ``schema_format: auto`` fallback.
It reuses the session's smoke pipeline (prepared and derived sets, fine-tuned model) and puts its
sweep file and lock back afterwards, so the other end-to-end tests see the smoke profile.

Checked: the plan's request count equals the requests the server answered (one per instance: the
adaptive concurrency never overloads the one-slot server), every run FINISHED with the form it
used recorded, the report has the dense-vs-MoE and size sections, and a budget cap stops a
second sweep before its first request.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from src.tracking.history import read_history
from tests.helpers.llamacpp_server import llama_server
from tests.helpers.smoke_project import dvc, pipeline_env

pytestmark = pytest.mark.slow

MODELS = ["ministral_8b", "mixtral_8x7b", "ministral_3b"]  # family mistral: dense and MoE, two dense sizes
STRATEGIES = ["D"]  # the study condition's strict schema goes to D (one strategy: each adds 3 stages)


def _write_sweep(project: Path, **changes) -> None:
    sweep = yaml.safe_load((project / "conf/profiles/smoke.yaml").read_text())
    sweep["sweep"].update(changes)
    (project / "sweep.yaml").write_text(yaml.safe_dump(sweep, sort_keys=False))


def _env(server_url: str) -> dict[str, str]:
    env = pipeline_env()
    env.update(TEMPGEN_BASE_URL=server_url, TEMPGEN_SERVED_MODEL="smollm2")
    env.pop("TEMPGEN_API_KEY_ENV", None)
    return env


def _in(project: Path, env: dict[str, str], *args: str, timeout: int = 2400) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=project, env=env, capture_output=True, text=True, timeout=timeout
    )


def _restore(project: Path, saved: dict[str, bytes]) -> None:
    for name, content in saved.items():
        (project / name).write_bytes(content)
    dvc(project, "checkout", "--force")


def test_a_cut_down_paper_profile_runs_against_a_self_hosted_server(smoke_project: Path, tmp_path: Path):
    pytest.importorskip("llama_cpp.server.app", reason="llama-cpp-python's server extras are not installed")
    project = smoke_project
    saved = {name: (project / name).read_bytes() for name in ("sweep.yaml", "dvc.lock")}
    cut = dict(
        profile="paper_cut",
        models=MODELS,
        strategies=STRATEGIES,
        condition="study_condition",
        provider="custom",
        limit=2,
        max_input_words=120,
        max_tokens=32,
        max_tokens_document=48,
        resamples=200,
        # priced API models: a paid profile without a cap refuses to start (docs/cost.md); this
        # one is far above the plan's ceiling (checked below), so the cap only guards
        max_cost_usd=50.0,
    )
    try:
        with llama_server(tmp_path / "server.log") as server:
            env = _env(server.url)
            _write_sweep(project, **cut)
            planned = _in(project, env, "src.plan", "--sweep", "sweep.yaml", "--json", str(tmp_path / "plan.json"))
            assert planned.returncode == 0, planned.stderr[-3000:]
            total = json.loads((tmp_path / "plan.json").read_text())["total"]
            assert total["to_send"] > 0
            assert 0 < total["ceiling_cost_usd"] < cut["max_cost_usd"]

            done = _in(project, env, "dvc", "repro")
            assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
            # one answered request per planned request: no retries, no duplicates from timeouts
            assert server.completed_requests() == total["to_send"], server.log.read_text()[-3000:]

            import mlflow

            client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{project / 'mlruns/mlflow.db'}")
            for model in MODELS:
                for strategy in STRATEGIES:
                    summary = project / f"summaries/runs/{model}-{strategy}.json"
                    assert json.loads(summary.read_text())["key"]  # the summary names its run by key
                    run = client.get_run(read_history(summary)["run_id"])  # this machine's run: its history
                    assert run.info.status == "FINISHED"
                    assert run.data.params["provider"] == "custom"
                    # nested under the profile's parent run, tagged for the UI's group-by
                    assert run.data.tags["mlflow.parentRunId"] and run.data.tags["profile"] == "paper_cut"
                    assert run.data.tags["family"] == "mistral"
                    # the strict schema refused once, json_object used from then on; the other models'
                    # D runs ask the same prompts of the one served model and send nothing (no form)
                    expected = "json_object" if (model, strategy) == (MODELS[0], "D") else None
                    assert run.data.params.get("schema_form_used") == expected, (model, strategy)
            report = (project / "reports/report.md").read_text()
            # the comparison is drawn (a table per family), though 2 instances per set decide nothing
            moe = report.split("### Dense vs MoE within a family", 1)[1].split("###", 1)[0]
            assert "This comparison" not in moe and "mistral" in moe, moe[:800]
            size = report.split("### Model size", 1)[1].split("###", 1)[0]
            assert size.strip() and "needs more models" not in size, size[:800]

            # a second sweep (one more strategy) over a cap of one request stops before sending
            before = server.completed_requests()
            _write_sweep(project, **{**cut, "strategies": [*STRATEGIES, "I"], "max_requests": 1})
            capped = _in(project, env, "dvc", "repro")
            assert capped.returncode != 0
            assert "error: budget:" in capped.stdout + capped.stderr, (capped.stdout + capped.stderr)[-3000:]
            assert server.completed_requests() == before
    finally:
        _restore(project, saved)
