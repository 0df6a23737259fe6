"""Independent per-record work spread over worker processes, one CPU thread each.

A TextAttack search is sequential Python around small victim batches: torch gains little from
a second thread there, so two single-thread processes, each attacking its share of the
records, finish sooner than one process with two threads (docs/pipeline.md, "Time per stage").
Workers start with ``spawn`` (never a fork of a process that holds torch threads) and build
their own models once; records are handed out one at a time, so a slow record does not
hold back the others, and results come back in the records' order. Every record is seeded
on its own (:func:`src.derive.attacker.instance_seed`), and every worker computes with one thread,
so the results do not depend on the number of workers.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tqdm import tqdm

Item = TypeVar("Item")
Result = TypeVar("Result")

#: Thread pools a worker limits to one thread (torch's own is set in :func:`_one_thread`).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")

_work: Callable[[Any], Any] | None = None  # the worker process's function, built by its initializer


def default_workers() -> int:
    """One worker per CPU this process may use."""
    return max(1, len(os.sched_getaffinity(0)))


def map_in_workers(
    make_work: Callable[[Any], Callable[[Item], Result]],
    setup: Any,
    items: Sequence[Item],
    workers: int,
    desc: str,
) -> list[Result]:
    """``[work(item) for item in items]`` with ``work = make_work(setup)`` built once in each of
    ``workers`` processes (in this process when 1). ``make_work`` must be a module-level
    function and ``setup`` picklable."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    workers = min(workers, len(items)) or 1
    if workers == 1:
        _one_thread()
        work = make_work(setup)
        return [work(item) for item in tqdm(items, desc=desc, unit="instance")]
    saved = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    os.environ.update(dict.fromkeys(THREAD_VARIABLES, "1"))  # inherited by the spawned workers
    try:
        with multiprocessing.get_context("spawn").Pool(
            workers, initializer=_start, initargs=(make_work, setup)
        ) as pool:
            return list(tqdm(pool.imap(_call, items, chunksize=1), total=len(items), desc=desc, unit="instance"))
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def _start(make_work: Callable[[Any], Callable[[Any], Any]], setup: Any) -> None:
    global _work
    _one_thread()
    _work = make_work(setup)


def _call(item: Any) -> Any:
    assert _work is not None, "worker process not initialised"
    return _work(item)
