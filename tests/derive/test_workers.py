"""map_in_workers: results in order, one thread per worker, the parent's environment kept."""

from __future__ import annotations

import os

import pytest

from src.derive.workers import THREAD_VARIABLES, map_in_workers


def threads_reporter(offset: int):
    """A worker function (built once per worker): the item plus ``offset``, and the worker's threads."""
    import torch

    def work(item: int) -> tuple[int, int, str | None, int]:
        return item + offset, torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS"), os.getpid()

    return work


def test_two_workers_return_every_result_in_order_on_one_thread_each(restore_torch_threads):
    before = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    results = map_in_workers(threads_reporter, 100, list(range(12)), workers=2, desc="test")
    assert [r[0] for r in results] == [100 + i for i in range(12)]
    assert {r[1] for r in results} == {1} and {r[2] for r in results} == {"1"}
    pids = {r[3] for r in results}  # one quick worker may take every item
    assert 1 <= len(pids) <= 2 and os.getpid() not in pids
    assert {name: os.environ.get(name) for name in THREAD_VARIABLES} == before


def test_one_worker_runs_in_this_process(restore_torch_threads):
    results = map_in_workers(threads_reporter, 1, [1, 2], workers=1, desc="test")
    assert [r[0] for r in results] == [2, 3] and {r[3] for r in results} == {os.getpid()}
    with pytest.raises(ValueError, match="workers must be >= 1"):
        map_in_workers(threads_reporter, 0, [1], workers=0, desc="test")


@pytest.fixture
def restore_torch_threads():
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
