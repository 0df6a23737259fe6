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
from src.core.errors import ConfigError
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


def test_a_multirun_is_planned_per_combination(workspace: Path, capsys, monkeypatch):
    monkeypatch.setenv("TEMPGEN_TODAY", "2025-08-01")  # prices read 2025-07: fresh, no age line
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
    assert lines[4].startswith("total: 12 requests")
    # per mode for the total: qwen25_7b's batch price is OpenRouter's documented discount (half the
    # list price), its flex price the list price standing in
    assert lines[5].startswith("by mode") and [line.split(":")[0].strip() for line in lines[6:9]] == list(MODES)
    sync_cost = usd(plan["total"]["ceiling_cost_usd"])
    assert lines[6].startswith(f"  sync: cost at most {sync_cost}; wait: at most")
    batch = plan["total"]["modes"]["batch"]["ceiling_cost_usd"]
    assert batch == pytest.approx(plan["total"]["ceiling_cost_usd"] / 2)
    assert lines[7].startswith(f"  batch: cost at most {usd(batch)}") and "up to 24 h" in lines[7]
    assert lines[8].startswith(f"  flex: cost at most {sync_cost}") and "the list price stands in" in lines[8]
    # then power beside the cost (from this checkout's evidence when a profile ran, else one line saying so)
    assert lines[9].startswith("power") and all(line.startswith(("power", " ")) for line in lines[9:])


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
    sweep = yaml.safe_load((REPO_ROOT / "sweep.yaml").read_text())["sweep"]
    sweep.update({"models": ["m1", "m2"], "strategies": ["I", "A+D"], "condition": "study_condition", "limit": None})
    sweep.update({"max_input_words": 300, "max_tokens": 64, "max_tokens_document": 160})
    sweep.update({"provider": "vllm", "profile": "pilot", "mode": "batch"})
    profile.write_text(yaml.safe_dump({"sweep": sweep}))
    configurations = sweep_configurations(profile, ["budget.max_cost_usd=5"])
    fixed = [
        "condition=study_condition",
        "limit=null",  # no limit
        "max_input_words=300",
        "generation.max_tokens=64",
        "generation.max_tokens_document=160",
        "provider=vllm",
        "profile=pilot",
        "++provider.options.mode=batch",  # sweep.mode: how every API model is bought
        f"budget.sweep_file={profile}",  # the stage reads the active profile's caps; the plan, the planned one's
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
    with pytest.raises(ValueError, match="sweep.max_tokens: field required"):
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

    ledger_settings = {"ledger_file": ".cache/spend.json", "stale_after_s": 600, "price_max_age_days": 90}
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
    # no stage templates a cap into its command, so the word None is no cap's stand-in: a typo, said so
    with pytest.raises(ConfigError, match="budget.max_cost_usd: expected a number of USD >= 0 or null, got 'None'"):
        budget_from_mapping({**ledger_settings, "max_cost_usd": "None"})
    assert budget_from_mapping(ledger_settings).price_max_age_days == 90

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

    from src.backends.llamacpp_backend import LlamaCppBackend
    from src.backends.tokenizers import token_counter
    from src.config.schema import Model
    from src.core.requests import ChatRequest

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


def _profile_project(tmp_path: Path) -> tuple[Path, Path, dict]:
    """A fresh clone's state: prepared base, train, t2c and len sets, no derived set, no cache; and
    a paper-like profile (two priced API models, two strategies, derive_limit 3, batch, gpt41)."""
    prepared = tmp_path / "prepared"
    spans = {
        "timex": [("Friday", "TIMEX")],
        "eventx": [("rose", "EVENT")],
        "comp": [("rose", "EVENT"), ("Friday", "TIMEX")],
    }
    for task in ("timex", "eventx", "comp"):
        for split, n in (("base", 5), ("train", 6), ("t2c", 4), ("len", 2)):
            if task == "comp" and split in ("t2c", "len"):
                continue
            records = [
                make_record(f"{split}{i}#s0", f"Sales of unit {i} rose on Friday in {split} .", spans[task])
                for i in range(n)
            ]
            write_records(prepared / task / f"{split}.jsonl", records)
    sweep = yaml.safe_load((REPO_ROOT / "conf/profiles/paper.yaml").read_text())["sweep"]
    sweep.update(models=["qwen25_7b", "llama3_8b"], strategies=["I", "D"], derive_limit=3, profile="paper-test")
    profile = tmp_path / "paper-test.yaml"
    profile.write_text(yaml.safe_dump({"sweep": sweep}))
    return prepared, profile, sweep


def test_a_profile_is_planned_from_its_own_settings_on_a_fresh_clone(tmp_path: Path, capsys, monkeypatch):
    """Regression: with nothing derived the paper profile's plan stopped (`dataset file(s) not
    found: data/derived/...`), had no line for the GPT-4.1 rewriting, and priced batch as sync."""
    monkeypatch.setenv("TEMPGEN_TODAY", "2026-12-04")
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    prepared, profile, sweep = _profile_project(tmp_path)
    extra = [f"paths.prepared={prepared}", f"paths.derived={tmp_path / 'derived'}", f"paths.cache={tmp_path / 'c'}"]
    out = tmp_path / "plan.json"
    assert plan_main(["--sweep", str(profile), *extra, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    plan = json.loads(out.read_text())
    assert not (tmp_path / "derived").exists()

    # the request count, computed here from the profile's settings and the base sets' sizes
    def size(task: str, name: str) -> int:
        return len((prepared / task / f"{name}.jsonl").read_text().splitlines())

    per_configuration = size("comp", "base")
    for task in ("timex", "eventx"):
        derived = 3 * min(sweep["derive_limit"], size(task, "base"))  # adv, adv_p, voc
        per_configuration += size(task, "base") + size(task, "t2c") + size(task, "len") + derived
    configurations = len(sweep["models"]) * len(sweep["strategies"])
    assert [c["requests"] for c in plan["configurations"]] == [per_configuration] * configurations
    # a derived set's prompts are its own, not identical prompts of base (they were: no cost counted)
    datasets = plan["configurations"][0]["datasets"]
    assert all(datasets[f"{t}/{n}"]["to_send"] == 3 for t in ("timex", "eventx") for n in ("adv", "adv_p", "voc"))
    assert "estimated (not built for this profile yet): " in printed and "sweep.derive_limit=3" in printed

    # the rewriting: every attempt of every perturbed instance, at GPT-4.1's price
    attempts = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())["derive"]["adv_p"]["max_attempts"]
    stages = plan["stages"]
    assert [s["stage"] for s in stages] == ["adv_p@timex", "adv_p@eventx"]
    assert [s["requests"] for s in stages] == [3 * attempts, 3 * attempts]
    gpt41 = yaml.safe_load((REPO_ROOT / "conf/model/gpt41.yaml").read_text())["price"]
    for stage in stages:
        expected = (stage["prompt_token_bound"] * gpt41["input_per_mtok"] + stage["output_token_ceiling"] * 8.0) / 1e6
        assert stage["ceiling_cost_usd"] == pytest.approx(expected) and stage["ceiling_cost_usd"] > 0
    rewriting = [line for line in printed.splitlines() if line.startswith("rewriting adv_p@")]
    assert len(rewriting) == 2 and all("gpt41" in line and "cost at most $" in line for line in rewriting)
    total = plan["total"]
    assert total["requests"] == per_configuration * configurations + 2 * 3 * attempts
    assert total["ceiling_cost_usd"] == pytest.approx(
        sum(c["ceiling_cost_usd"] for c in plan["configurations"]) + sum(s["ceiling_cost_usd"] for s in stages)
    )

    # sweep.mode: batch: every run is planned in batch mode, at half the list price (a marked discount)
    for configuration in plan["configurations"]:
        assert configuration["mode"] == "batch"
        modes = configuration["modes"]
        assert modes["batch"]["ceiling_cost_usd"] == pytest.approx(modes["sync"]["ceiling_cost_usd"] / 2)
        assert configuration["ceiling_cost_usd"] == pytest.approx(modes["batch"]["ceiling_cost_usd"])
        assert configuration["ceiling_cost_usd"] < modes["sync"]["ceiling_cost_usd"]
        assert "documented discount" in configuration["price"]["discount"]
    assert "a documented discount, not a price read" in printed

    # no cap: named with the plan's ceiling; prices read 2025-07 are more than 90 days old
    assert f"its plan's ceiling is {usd(total['ceiling_cost_usd'])} (sweep.mode: batch)" in printed
    assert f"set sweep.max_cost_usd in {profile}" in printed
    for model in ("qwen25_7b", "llama3_8b", "gpt41"):
        assert f"warning: price of {model} read 2025-07, 521 days before 2026-12-04" in printed
    monkeypatch.setenv("TEMPGEN_TODAY", "2025-08-01")
    assert plan_main(["--sweep", str(profile), *extra]) == 0
    assert "warning: price" not in capsys.readouterr().out


def test_a_derived_set_built_for_another_profile_is_estimated(tmp_path: Path, capsys):
    """Regression: a checkout that ran the default profile planned the paper profile on the
    default's 44-instance derived sets."""
    prepared, profile, sweep = _profile_project(tmp_path)
    derived = tmp_path / "derived"
    for task in ("timex", "eventx"):
        for name in ("adv", "adv_p", "voc"):
            write_records(derived / task / f"{name}.jsonl", [make_record("base0#s0", "On Friday .", ["Friday"])])
            stats = {"limit": 1, "seed": 13, "generator": {"model_id": "openai/gpt-4.1"}}
            (derived / task / f"{name}.stats.json").write_text(json.dumps(stats))
    # voc of timex built for this profile: read as built
    (derived / "timex" / "voc.stats.json").write_text(json.dumps({"limit": sweep["derive_limit"], "seed": 13}))
    extra = [f"paths.prepared={prepared}", f"paths.derived={derived}", f"paths.cache={tmp_path / 'c'}"]
    out = tmp_path / "plan.json"
    assert plan_main(["--sweep", str(profile), *extra, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    datasets = json.loads(out.read_text())["configurations"][0]["datasets"]
    assert datasets["timex/voc"]["requests"] == 1  # built for the profile
    assert datasets["timex/adv"]["requests"] == datasets["eventx/voc"]["requests"] == 3  # estimated
    assert "timex/adv (3)" in printed and "timex/voc" not in printed.split("estimated")[1].split("\n")[0]


def test_a_fresh_clone_without_prepared_sets_is_planned_from_the_raw_corpora(tmp_path: Path, capsys, monkeypatch):
    """Regression: on a fresh clone (`dvc pull data.dvc` only) the paper profile's plan exited 2
    (`data/prepared/... not found`). The plan now builds the test sets with the prepare stage's
    own functions into a temporary folder: the same counts as with the sets prepared, nothing
    written to ``paths.prepared``. (The build itself is the prepare stage's, tested in
    tests/data; here it returns the synthetic project's sets, read back by the plan.)"""
    import src.planning.profile as profile_plan
    from src.data.schema import read_records

    monkeypatch.setenv("TEMPGEN_TODAY", "2026-12-04")
    prepared, profile, _ = _profile_project(tmp_path)
    built = {(path.parent.name, path.stem): read_records(path) for path in sorted(prepared.glob("*/*.jsonl"))}
    calls = []

    def build(params: dict, seed: int) -> dict:
        calls.append(seed)
        return built

    monkeypatch.setattr(profile_plan, "build_datasets", build)
    common = [f"paths.derived={tmp_path / 'derived'}", f"paths.cache={tmp_path / 'c'}"]
    with_sets, without = tmp_path / "with.json", tmp_path / "without.json"
    assert plan_main(["--sweep", str(profile), f"paths.prepared={prepared}", *common, "--json", str(with_sets)]) == 0
    assert calls == [] and "prepared from data/raw" not in capsys.readouterr().out
    absent = tmp_path / "not-prepared"
    assert plan_main(["--sweep", str(profile), f"paths.prepared={absent}", *common, "--json", str(without)]) == 0
    printed = capsys.readouterr().out
    assert calls == [13] and not absent.exists()
    assert f"{absent} has not been built: the test sets were prepared from data/raw for this plan" in printed
    planned, expected = json.loads(without.read_text()), json.loads(with_sets.read_text())
    assert [c["requests"] for c in planned["configurations"]] == [c["requests"] for c in expected["configurations"]]
    assert [s["requests"] for s in planned["stages"]] == [s["requests"] for s in expected["stages"]] != []
    assert planned["total"]["requests"] == expected["total"]["requests"]
