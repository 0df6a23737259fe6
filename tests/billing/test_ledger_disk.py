"""A ledger on a disk that is read-only, or full, or fills while the run sends (issue 48).

Each disk is a real tmpfs mounted for the test (root in a container that allows it; skipped,
with the reason, elsewhere): refused up front with one line when nothing can be written; when
the disk fills mid-run, the run stops sending at its next admission, and its settle lands in the
ledger through the room kept for it, at the server's bill.
"""

from __future__ import annotations

import contextlib
import math
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from src.backends.openai_backend import OpenAIBackend
from src.billing.ledger import Budget, LedgerUnwritable, read_ledger, reserve
from src.billing.meter import Meter
from src.billing.prices import Price, TokenCounter
from src.core.requests import ChatRequest
from tests.helpers.openai_server import OpenAIServer, quoted_words_answer

PRICE = Price(0.5, 2.0)
pytestmark = pytest.mark.timeout(120)


@contextlib.contextmanager
def tmpfs(folder: Path, size_kib: int) -> Iterator[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(folder)],
                             capture_output=True, text=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()[:200]}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> None:
    """Write until the disk says it is full, down to its last byte."""
    chunk = 65536
    with open(folder / "filler", "ab", buffering=0) as handle:
        while chunk:
            try:
                handle.write(b"\0" * chunk)
            except OSError:
                chunk //= 2


def budget(folder: Path) -> Budget:
    return Budget(max_cost_usd=1.0, ledger="disk", ledger_file=folder / "spend.json", stale_after_s=600)


def test_a_read_only_disk_is_refused_before_anything_is_sent(tmp_path: Path):
    with tmpfs(tmp_path / "disk", 4096) as disk:
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        with pytest.raises(LedgerUnwritable) as refused:
            reserve(budget(disk), "run", 0.1, 10)
    assert str(refused.value).startswith("budget.ledger_file: cannot write")
    assert "Read-only file system" in str(refused.value) and "\n" not in str(refused.value)


def test_a_disk_without_room_for_the_last_writes_is_refused_up_front(tmp_path: Path):
    with tmpfs(tmp_path / "disk", 512) as disk:  # below the room a run keeps for its settle
        with pytest.raises(LedgerUnwritable) as refused:
            reserve(budget(disk), "run", 0.1, 10)
        assert "No space left on device" in str(refused.value)
        assert not list((disk / "spend-journals").glob("*.jsonl"))  # no journal left behind


def test_a_disk_that_fills_mid_run_stops_sending_and_the_settle_lands_at_the_servers_bill(tmp_path: Path):
    """The disk fills after the fourth answer: the journal's last page still takes a few lines, then
    a line fails, the run stops sending at its next admission, and the settle lands in the ledger
    (the room kept for it is given back) at what the server billed."""
    n = 40
    requests = [ChatRequest(messages=(("user", f'words "w{i}" here'),), max_tokens=32) for i in range(n)]
    with tmpfs(tmp_path / "disk", 4096) as disk:
        served = []

        def answer(body: dict) -> str:
            served.append(1)
            if len(served) == 4:
                fill(disk)
            return quoted_words_answer(body)

        with OpenAIServer(answer=answer, price_in_per_token=0.5e-6, price_out_per_token=2e-6) as provider:
            backend = OpenAIBackend(model_id="m", base_url=provider.base_url, max_concurrency=1, max_retries=0)
            reservation = reserve(budget(disk), "run", 0.5, len(requests))
            backend.meter = Meter(PRICE, TokenCounter(), reservation)
            results = backend.generate(requests)
            billed, responses = provider.billed_cost, provider.billed["responses"]
        notes = reservation.settle(backend.meter.spend())
        data = read_ledger(disk / "spend.json")
    answered = sum(r.ok for r in results)
    assert 4 <= answered == responses < n and reservation.unsettled is None and notes == []
    stopped = [r.error for r in results if not r.ok]
    assert stopped and all("spend journal" in e and "No space left on device" in e for e in stopped)
    assert len(data["ledgers"]["disk"]) == 1 and data["reservations"]["disk"] == []
    assert math.isclose(data["ledgers"]["disk"][0]["cost_usd"], billed, rel_tol=1e-9) and billed > 0
