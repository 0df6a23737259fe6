"""Which batches in flight a run may take as its own: only those holding its requests."""

from __future__ import annotations

from pathlib import Path

from src.backends.batch_state import BatchState, custom_ids, open_batches, state_file
from src.backends.openai_backend import OpenAIBackend
from src.core.requests import ChatRequest


def _requests(strategy: str, n: int = 3) -> list[ChatRequest]:
    return [ChatRequest(messages=(("user", f"{strategy}: sentence {i}"),), max_tokens=16) for i in range(n)]


def test_another_runs_batch_of_the_same_model_is_not_this_runs(tmp_path: Path):
    """Issue 48: every uncollected batch of the endpoint and model was handed to ``reserve`` as the
    run's own, so a killed strategy's hold was folded into another strategy's ceiling while it still billed."""
    backend = OpenAIBackend(model_id="m", base_url="http://127.0.0.1:9/v1", mode="batch")
    backend.batch_dir = tmp_path / "batches"
    deductive, inductive = _requests("D"), _requests("I")
    state = BatchState(state_file(backend))
    state.record({"key": "d-batch", "batch_id": "b1", "custom_ids": custom_ids(backend, deductive), "collected": False})
    state.record({"key": "done", "batch_id": "b0", "custom_ids": custom_ids(backend, inductive), "collected": True})
    assert open_batches(backend, inductive) == []
    assert open_batches(backend, deductive) == ["d-batch"]
    assert open_batches(backend, [inductive[0], deductive[2]]) == ["d-batch"]  # one of its lines is enough
    assert open_batches(backend, []) == []
    sync = OpenAIBackend(model_id="m", base_url="http://127.0.0.1:9/v1")
    assert open_batches(sync, deductive) == []
