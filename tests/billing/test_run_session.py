"""A prompted run is a paid session (src/runs/lifecycle.py through src/billing/session.py): under a
paid sweep profile without ``sweep.max_cost_usd`` it refuses in one line before any request, and
a stale price is named in its first lines."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from src.data.schema import write_records
from tests.helpers.openai_server import FakeOpenAIServer
from tests.helpers.paths import REPO_ROOT
from tests.helpers.resumable_run import answer, command, env, records


def _run(workspace: Path, server: FakeOpenAIServer, max_cost_usd: float | None) -> subprocess.CompletedProcess:
    profile = workspace / "sweep.yaml"
    sweep = yaml.safe_load((REPO_ROOT / "sweep.yaml").read_text(encoding="utf-8"))["sweep"]
    profile.write_text(yaml.safe_dump({"sweep": {**sweep, "profile": "paper", "max_cost_usd": max_cost_usd}}))
    # the profile's overrides come first (src.config.profile): its provider is the loopback server
    settings = [f"budget.sweep_file={profile}", f"budget.ledger_file={workspace / 'spend.json'}", "provider=custom"]
    return subprocess.run(
        [*command(workspace, server), *settings],
        cwd=REPO_ROOT,
        env={**env(), "TEMPGEN_TODAY": "2026-12-04", "TEMPGEN_BASE_URL": server.base_url, "TEMPGEN_SERVED_MODEL": "m"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_paid_run_under_an_uncapped_profile_refuses_in_one_line_and_a_stale_price_comes_first(tmp_path: Path):
    for split in ("base", "train"):
        write_records(tmp_path / "prepared" / "timex" / f"{split}.jsonl", records())
    with FakeOpenAIServer(answer=answer) as server:
        refused = _run(tmp_path, server, None)
        assert refused.returncode == 2, refused.stderr[-3000:]
        assert server.request_count == 0
        errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in refused.stderr
        assert errors[0].startswith("error: budget: profile 'paper' sends paid requests and sets no cap: ")
        assert f"set sweep.max_cost_usd in {tmp_path / 'sweep.yaml'}" in errors[0]
        assert not (tmp_path / "summary.json").exists()

        done = _run(tmp_path, server, 1.0)
        assert done.returncode == 0, done.stderr[-3000:]
        assert server.request_count == 9
    lines = done.stdout.splitlines()  # the log
    stale = next(n for n, line in enumerate(lines) if "price of qwen25_7b read 2025-07" in line)
    plan = next(n for n, line in enumerate(lines) if "plan: 9 requests" in line)
    assert stale < plan and "budget.price_max_age_days=90" in lines[stale]
