"""``python -m src.plan`` and the run's budget, against a loopback OpenAI-compatible server.

The plan must count exactly what the run then sends (requests, prompt tokens by the stated
estimate, the output ceiling), a run whose plan passes a cap stops before its first request and
before an MLflow run opens, and a sweep's ledger makes a later run count what earlier ones spent.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from src.billing.ledger import Budget, budget_problem, read_ledger, reserve, spent, usd
from src.billing.prices import MODES, Price
from src.config.errors import ConfigError
from src.data.schema import write_records
from src.plan import expand, main as plan_main, sweep_configurations
from tests.helpers.openai_server import FakeOpenAIServer
from tests.helpers.paths import REPO_ROOT
from tests.helpers.records import make_record

PRICE = Price(0.04, 0.1, "2025-07", "openrouter.ai/models")  # conf/model/qwen25_7b.yaml
RECORDS = [
    make_record("d1#s0", "The meeting was held on Friday .", ["Friday"]),
    make_record("d2#s0", "He left in 1998 .", ["1998"]),
    make_record("d3#s0", "He left in 1998 .", ["1998"]),  # the same prompt as d2: sent once
]


def _answer(body: dict) -> str:
    return '["Friday"]'


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    for split in ("base", "train"):
        write_records(tmp_path / "prepared" / "timex" / f"{split}.jsonl", RECORDS)
    return tmp_path


def _overrides(workspace: Path, server: FakeOpenAIServer, *extra: str) -> list[str]:
    return [
        "model=qwen25_7b",
        "strategy=D",
        "dimension=base",
        "tasks=[timex]",
        f"model.options.base_url={server.base_url}",
        "model.options.max_retries=1",
        "model.options.backoff_base_s=0.01",
        "model.options.backoff_max_s=0.02",
        f"paths.prepared={workspace / 'prepared'}",
        f"paths.cache={workspace / 'cache'}",
        f"budget.ledger_file={workspace / 'spend.json'}",
        f"mlflow.tracking_uri=sqlite:///{workspace / 'mlflow.db'}",
        f"hydra.run.dir={workspace / 'outputs'}",
        "scoring.bootstrap_resamples=50",
        *extra,
    ]


def _run(workspace: Path, server: FakeOpenAIServer, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "OPENROUTER_API_KEY")}
    return subprocess.run(
        [sys.executable, "-m", "src.run", *_overrides(workspace, server, *extra)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _plan(workspace: Path, server: FakeOpenAIServer, capsys, *extra: str) -> tuple[dict, str]:
    out = workspace / "plan.json"
    assert plan_main([*_overrides(workspace, server, *extra), "--json", str(out)]) == 0
    return json.loads(out.read_text()), capsys.readouterr().out


def test_the_plan_counts_what_the_run_sends_and_the_run_logs_it(workspace: Path, capsys):
    with FakeOpenAIServer(answer=_answer) as server:
        plan, printed = _plan(workspace, server, capsys)
        assert server.request_count == 0, "planning sends nothing"
        assert not (workspace / "mlflow.db").exists(), "planning opens no MLflow run"
        config = plan["configurations"][0]
        assert (config["requests"], config["duplicates"], config["cached"], config["to_send"]) == (3, 1, 0, 2)
        assert config["prompt_tokens_counted_by"] == "estimate (characters / 4)"
        assert "estimate (characters / 4)" in printed and "read 2025-07" in printed

        done = _run(workspace, server)
        assert done.returncode == 0, done.stderr[-3000:]
        # what the server received is what the plan counted: requests, prompt characters / 4, max_tokens
        assert server.request_count == config["to_send"] == 2
        chars = [sum(len(m["content"]) for m in body["messages"]) for body in server.bodies]
        assert config["prompt_tokens"] == sum(math.ceil(c / 4) for c in chars)
        ceiling = sum(body["max_tokens"] for body in server.bodies)
        assert config["output_token_ceiling"] == ceiling
        # the cost ceiling counts estimated prompts at their bound: one token per UTF-8 byte, and 8 per message
        size = [sum(len(m["content"].encode()) + 8 for m in body["messages"]) for body in server.bodies]
        assert config["prompt_token_bound"] == sum(size) and f"at most {sum(size):,} (one token per byte)" in printed
        expected_cost = (config["prompt_token_bound"] * 0.04 + ceiling * 0.1) / 1e6
        assert config["ceiling_cost_usd"] == pytest.approx(expected_cost)
        assert plan["total"]["ceiling_cost_usd"] == pytest.approx(expected_cost)

        import mlflow

        client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{workspace / 'mlflow.db'}")
        run = client.search_runs([client.get_experiment_by_name("tempgen").experiment_id])[0]
        logged = json.loads(Path(client.download_artifacts(run.info.run_id, "plan.json", str(workspace))).read_text())
        assert logged["to_send"] == 2 and logged["prompt_tokens"] == config["prompt_tokens"]

        again, _ = _plan(workspace, server, capsys)
        config = again["configurations"][0]
        assert (config["cached"], config["to_send"], config["ceiling_cost_usd"]) == (2, 0, 0.0)


def test_a_multirun_is_planned_per_combination(workspace: Path, capsys):
    with FakeOpenAIServer(answer=_answer) as server:
        plan, printed = _plan(workspace, server, capsys, "model=qwen25_7b,vllm_example", "generation.max_tokens=8,16")
    names = [(c["configuration"], c["output_token_ceiling"]) for c in plan["configurations"]]
    assert names == [("qwen25_7b-D", 16), ("qwen25_7b-D", 32), ("vllm_example-D", 16), ("vllm_example-D", 32)]
    assert plan["total"]["to_send"] == 8 and plan["total"]["output_token_ceiling"] == 96
    # the self-hosted model is free: the total is the two qwen25_7b configurations
    assert plan["total"]["ceiling_cost_usd"] == pytest.approx(
        sum(c["ceiling_cost_usd"] for c in plan["configurations"][:2])
    )
    lines = printed.splitlines()
    assert len(lines) == 9 and lines[4].startswith("total: 12 requests")
    # per mode for the total: qwen25_7b has no batch or flex price, so the list price stands in
    assert lines[5].startswith("by mode") and [line.split(":")[0].strip() for line in lines[6:]] == list(MODES)
    sync_cost = usd(plan["total"]["ceiling_cost_usd"])
    assert lines[6].startswith(f"  sync: cost at most {sync_cost}; wait: at most")
    assert lines[7].startswith(f"  batch: cost at most {sync_cost} (the list price stands in") and "24 h" in lines[7]


def test_expand_follows_hydra_multirun_order():
    assert expand(["model=a,b", "limit=3", "strategy=I,D"]) == [
        ["model=a", "limit=3", "strategy=I"],
        ["model=a", "limit=3", "strategy=D"],
        ["model=b", "limit=3", "strategy=I"],
        ["model=b", "limit=3", "strategy=D"],
    ]
    assert expand(["tasks=[timex,comp]"]) == [["tasks=[timex,comp]"]]


def test_the_sweep_form_plans_the_commands_of_the_dvc_run_stages(tmp_path: Path):
    """Each configuration's overrides are the ``run@`` stage's command with the profile's values."""
    profile = tmp_path / "sweep.yaml"
    sweep = {"models": ["m1", "m2"], "strategies": ["I", "A+D"], "condition": "study_condition", "limit": None}
    sweep.update({"max_input_words": 300, "max_tokens": 64, "max_tokens_document": 160})
    sweep.update({"provider": "vllm", "profile": "pilot"})
    profile.write_text(yaml.safe_dump({"sweep": sweep}))
    configurations = sweep_configurations(profile, ["budget.max_cost_usd=5"])
    fixed = [
        "condition=study_condition",
        "limit=None",  # DVC writes null as None, which the run reads as no limit
        "max_input_words=300",
        "generation.max_tokens=64",
        "generation.max_tokens_document=160",
        "provider=vllm",
        "profile=pilot",
        "budget.sweep_file=sweep.yaml",
    ]
    assert configurations[1] == ["model=m1", "strategy=A+D", *fixed, "budget.max_cost_usd=5"]
    assert [c[:2] for c in configurations] == [
        ["model=m1", "strategy=I"],
        ["model=m1", "strategy=A+D"],
        ["model=m2", "strategy=I"],
        ["model=m2", "strategy=A+D"],
    ]
    # the committed profile: one configuration per model and strategy
    committed = yaml.safe_load((REPO_ROOT / "sweep.yaml").read_text())["sweep"]
    configurations = sweep_configurations(REPO_ROOT / "sweep.yaml", [])
    assert len(configurations) == len(committed["models"]) * len(committed["strategies"])
    del sweep["max_tokens"]
    profile.write_text(yaml.safe_dump({"sweep": sweep}))
    with pytest.raises(ValueError, match="reads sweep.max_tokens, which the profile lacks"):
        sweep_configurations(profile, [])


def test_a_run_over_budget_stops_before_a_request_or_an_mlflow_run(workspace: Path):
    with FakeOpenAIServer(answer=_answer) as server:
        for cap, key in (("budget.max_cost_usd=0.0000001", "budget.max_cost_usd=1e-07"), ("budget.max_requests=1", "")):
            done = _run(workspace, server, cap)
            assert done.returncode == 2, done.stderr[-2000:]
            errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
            assert len(errors) == 1 and errors[0].startswith("error: budget: qwen25_7b-D would"), done.stderr
            assert "(2 requests)" in errors[0] or "would send 2 requests" in errors[0]
            assert key in errors[0]
        assert server.request_count == 0
    assert not (workspace / "mlflow.db").exists()


@pytest.mark.slow  # three runs in subprocesses
def test_a_sweep_ledger_counts_what_earlier_runs_spent(workspace: Path, capsys):
    with FakeOpenAIServer(answer=_answer, report_cost=False) as server:
        done = _run(workspace, server, "budget.ledger=pilot", "budget.max_cost_usd=1")
        assert done.returncode == 0, done.stderr[-3000:]
        entries = read_ledger(workspace / "spend.json")["ledgers"]["pilot"]
        # the actual cost: the server's token counts (words) at the model file's price
        prompt_words = sum(len(m["content"].split()) for body in server.bodies for m in body["messages"])
        first_cost = PRICE.cost(prompt_words, 2 * len(_answer({}).split()))
        assert [(e["run"], e["requests"]) for e in entries] == [("qwen25_7b-D", 2)]
        assert entries[0]["cost_usd"] == pytest.approx(first_cost)

        # another configuration of the same sweep: its ceiling fits the cap alone, not with what was spent
        plan, _ = _plan(workspace, server, capsys, "generation.max_tokens=8")
        ceiling = plan["total"]["ceiling_cost_usd"]
        cap = f"budget.max_cost_usd={ceiling + first_cost / 2!r}"
        done = _run(workspace, server, "generation.max_tokens=8", "budget.ledger=pilot", cap)
        assert done.returncode == 2 and server.request_count == 2, done.stderr[-3000:]
        assert f"{usd(first_cost)} spent so far (ledger 'pilot': 1 runs settled)" in done.stderr
        # without the ledger, the run is capped on its own and fits
        done = _run(workspace, server, "generation.max_tokens=8", cap)
        assert done.returncode == 0 and server.request_count == 4, done.stderr[-3000:]


def test_budget_arithmetic_and_bad_values(tmp_path: Path):
    none = {"cost_usd": 0.0, "requests": 0, "runs": 0}

    def problem(budget, ceiling=0.5, to_send=10, settled=none, reserved_cost=0.0, reserved_requests=0):
        return budget_problem(budget, "m-D", ceiling, to_send, settled, reserved_cost, reserved_requests)

    assert problem(Budget(max_cost_usd=0.5)) is None
    assert "would cost $0.5 (10 requests)" in problem(Budget(max_cost_usd=0.49))
    assert "$0.1 reserved by runs in progress" in problem(Budget(max_cost_usd=0.5), reserved_cost=0.1)
    assert problem(Budget(max_requests=10)) is None
    assert "6 remain of budget.max_requests=10" in problem(Budget(max_requests=10), settled={**none, "requests": 4})
    assert "2 reserved by runs in progress" in problem(Budget(max_requests=10), reserved_requests=2)
    assert "without a price" in problem(Budget(max_cost_usd=5), ceiling=None)
    assert problem(Budget(max_cost_usd=0), ceiling=0.0, to_send=0) is None

    ledger = Budget(ledger="s", ledger_file=tmp_path / "spend.json", stale_after_s=600)
    for name, spend in (
        ("a-I", {"cost_usd": 0.25, "requests": 3, "attempts": 4}),
        ("a-D", {"cost_usd": 0.5, "requests": 2}),
    ):
        reserve(ledger, name, 1.0, 5).settle(spend)
    reserve(Budget(ledger="other", ledger_file=ledger.ledger_file, stale_after_s=600), "b-I", 9, 9).settle(
        {"cost_usd": 9, "requests": 9}
    )
    assert spent(ledger) == {
        "cost_usd": 0.75,
        "requests": 5,
        "runs": 2,
        "reserved_cost_usd": 0.0,
        "reserved_requests": 0,
    }
    (tmp_path / "spend.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="not a spend ledger"):
        spent(ledger)

    from src.config.budget import budget_from_mapping
    from src.config.schema import Model

    ledger_settings = {"ledger_file": ".cache/spend.json", "stale_after_s": 600}
    for bad in (
        {"max_cost_usd": -1},
        {"max_cost_usd": "ten"},
        {"max_requests": 1.5},
        {"ledger": ""},
        {"stale_after_s": 0},
        {"ledger_file": None},
        {"max_cost_usd": 1, "typo": 2},
    ):
        with pytest.raises(ConfigError, match="budget."):
            budget_from_mapping({**ledger_settings, **bad})
    dvc_nulls = budget_from_mapping({**ledger_settings, **dict.fromkeys(("max_cost_usd", "ledger"), "None")})
    assert (dvc_nulls.max_cost_usd, dvc_nulls.ledger) == (None, None)

    def price_of(backend: str, **block):
        model = {"name": "m", "backend": backend, "model_id": "x", **({"price": block} if block else {})}
        return Model.from_mapping(model).price

    assert price_of("llamacpp").cost(1e6, 1e6) == 0.0
    assert price_of("openai") is None
    with pytest.raises(ConfigError, match="model.price.output_per_mtok"):
        price_of("openai", input_per_mtok=1)
    with pytest.raises(ConfigError, match="model.price.batch.input_per_mtok"):
        price_of("openai", input_per_mtok=1, output_per_mtok=2, batch={})
    priced = price_of("openai", input_per_mtok=2, output_per_mtok=8, batch={"input_per_mtok": 1, "output_per_mtok": 4})
    assert priced.for_mode("batch").cost(1e6, 1e6) == 5.0 and not priced.for_mode("batch").fallback
    assert priced.for_mode("flex").cost(1e6, 1e6) == 10.0 and priced.for_mode("flex").fallback


def test_a_llamacpp_model_counts_completion_prompts_with_its_own_vocabulary():
    """The plan's count is the token count the backend itself feeds the model (no estimate)."""
    pytest.importorskip("llama_cpp")
    from omegaconf import OmegaConf

    from src.backends.base import ChatRequest
    from src.backends.llamacpp_backend import LlamaCppBackend
    from src.billing.prices import token_counter
    from src.config.schema import Model

    model = OmegaConf.load(REPO_ROOT / "conf/model/smollm2_135m.yaml")
    fields = {k: v for k, v in OmegaConf.to_container(model).items() if k != "defaults"}
    counter = token_counter(Model.from_mapping(fields))
    options = OmegaConf.to_container(model.options)
    backend = LlamaCppBackend(str(model.model_id), options["gguf_file"], options["gguf_package"], n_ctx=512, workers=1)
    prompt = "Find every time expression.\nText: The meeting was held on Friday , 3 May 1998 .\nAnswer:"
    request = ChatRequest(messages=(("user", prompt),), completion=True)
    tokens, exact = counter.count(request)
    assert exact and tokens == len(backend.encode(request)) and tokens != math.ceil(len(prompt) / 4)
    chat = ChatRequest(messages=(("system", "Be brief."), ("user", prompt)))
    assert counter.count(chat) == (math.ceil((len("Be brief.") + len(prompt)) / 4), False)  # stated estimate


def test_configurations_served_by_one_model_share_their_prompts_in_the_plan(workspace: Path, capsys, monkeypatch):
    """Regression: every model of a sweep sent to one self-hosted model (provider=custom with one
    served id) asks the same prompts; the second configuration's are answered from the cache the
    first filled, so the sweep's total counted them twice (132 planned, 44 sent)."""
    with FakeOpenAIServer(answer=_answer) as server:
        monkeypatch.setenv("TEMPGEN_BASE_URL", server.base_url)
        monkeypatch.setenv("TEMPGEN_SERVED_MODEL", "one-model")
        monkeypatch.delenv("TEMPGEN_API_KEY_ENV", raising=False)
        overrides = [o for o in _overrides(workspace, server) if not o.startswith(("model=", "model.options.base_url"))]
        out = workspace / "plan.json"
        assert plan_main(["model=qwen25_7b,llama3_8b", "provider=custom", *overrides, "--json", str(out)]) == 0
        plan = json.loads(out.read_text())
        first, second = plan["configurations"]
        assert (first["to_send"], second["to_send"], second["duplicates"]) == (2, 0, 3)
        assert plan["total"]["to_send"] == 2
        assert server.request_count == 0
