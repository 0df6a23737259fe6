"""Seeded selection of few-shot exemplars and their gold answers in the prompt's format.

Selection rule (``select_exemplars``), chosen so that the exemplars are diverse, small
and reproducible:

1. **Pool**: the records passed in (the base train split of the task; for ``comp`` the
   ``comp/train`` split), keeping only those with at least one span of the task's
   label(s) (for ``comp``: at least one TIMEX *and* one EVENT) and with a non-empty text.
   The pool is sorted by record id, so the input order does not matter.
2. **Short first**: only records whose word count (``src.data.text.words``) is at most the
   pool's median word count are kept, so that prompts stay small for small-context
   models. If that leaves fewer than ``k`` records, the whole pool is used.
3. **Stratify by number of spans**: records are grouped by their number of target spans,
   capped at ``SPAN_COUNT_CAP`` (1, 2, 3, "4 or more"). Each stratum is shuffled with a
   ``random.Random(seed)`` generator.
4. **Round robin**: exemplars are drawn one per stratum in ascending span-count order,
   round after round, preferring within a round records from documents not used yet
   (so exemplars come from different documents where possible) and never repeating a
   text. The resulting order is fixed for a seed, and ``k`` takes its first ``k``
   records: the exemplars for k=3 are a prefix of those for k=5 and k=8, which keeps
   the k selection on the validation split a like-for-like comparison.
"""

from __future__ import annotations

import json
import random
import statistics
from collections.abc import Sequence

from src.data.schema import Record, Span
from src.data.text import words
from src.study import TASK_LABELS, TASK_ORDER, TASKS

from . import templates
from .answer_schema import REASONING_KEY, REASONING_MAX_CHARS, TEXT_KEY, answer_shape

SPAN_COUNT_CAP = 4


def check_task(task: str) -> None:
    """Raise ValueError for a task name outside ``src.study.TASKS``."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r} (expected one of {', '.join(TASK_ORDER)})")


def target_spans(record: Record, task: str) -> list[Span]:
    """The record's spans that the task extracts, in text order."""
    labels = TASK_LABELS[task]
    return sorted((s for s in record.spans if s.label in labels), key=lambda s: (s.start, s.end))


def _is_usable(record: Record, task: str) -> bool:
    if not record.text.strip():
        return False
    present = {s.label for s in target_spans(record, task)}
    return all(label in present for label in TASK_LABELS[task])


def exemplar_order(train_records: Sequence[Record], seed: int, task: str) -> list[Record]:
    """All selectable records in the seeded, stratified order that ``select_exemplars`` cuts."""
    check_task(task)
    pool = sorted((r for r in train_records if _is_usable(r, task)), key=lambda r: r.id)
    if not pool:
        return []
    lengths = {r.id: len(words(r.text)) for r in pool}
    median = statistics.median(lengths.values())
    short = [r for r in pool if lengths[r.id] <= median]

    rng = random.Random(seed)
    ordered = _round_robin(short, task, rng)
    if len(ordered) < len(pool):
        rest = [r for r in pool if lengths[r.id] > median]
        ordered += _round_robin(rest, task, rng)
    return ordered


def _round_robin(records: list[Record], task: str, rng: random.Random) -> list[Record]:
    strata: dict[int, list[Record]] = {}
    for record in records:
        count = min(len(target_spans(record, task)), SPAN_COUNT_CAP)
        strata.setdefault(count, []).append(record)
    for count in sorted(strata):
        rng.shuffle(strata[count])

    ordered: list[Record] = []
    used_docs: set[str] = set()
    used_texts: set[str] = set()
    while any(strata.values()):
        for count in sorted(strata):
            bucket = strata[count]
            bucket[:] = [r for r in bucket if r.text not in used_texts]
            if not bucket:
                continue
            index = next((i for i, r in enumerate(bucket) if r.doc_id not in used_docs), 0)
            record = bucket.pop(index)
            ordered.append(record)
            used_docs.add(record.doc_id)
            used_texts.add(record.text)
    return ordered


def select_exemplars(train_records: Sequence[Record], k: int, seed: int, task: str) -> list[Record]:
    """Pick ``k`` diverse, short exemplars from the train records (rule in the module doc).

    Args:
        train_records: the task's train split (``comp/train`` for ``comp``); only these
            records can ever be returned.
        k: how many exemplars; 0 returns an empty list.
        seed: the selection seed; the same records and seed always give the same exemplars.
        task: ``timex``, ``eventx`` or ``comp``.

    Raises:
        ValueError: for a bad ``k`` or task, or when fewer than ``k`` records are usable.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be a non-negative integer, got {k!r}")
    if k == 0:
        check_task(task)
        return []
    ordered = exemplar_order(train_records, seed, task)
    if len(ordered) < k:
        raise ValueError(
            f"only {len(ordered)} usable {task} train records (with distinct texts and "
            f"spans of {'/'.join(TASK_LABELS[task])}) for k={k}"
        )
    return ordered[:k]


def _unique_texts(spans: list[Span]) -> list[str]:
    """Span strings in text order, each once (the parser dedupes answers the same way)."""
    seen: list[str] = []
    for span in spans:
        if span.text not in seen:
            seen.append(span.text)
    return seen


def _candidates_step(strings: list[str]) -> str:
    """``Candidates: a, b`` within the step bound: whole candidates while they fit, then ``...``."""
    steps = templates.ABDUCTIVE_EXAMPLE_STEPS
    full = steps["candidates"].format(candidates=", ".join(strings))
    if len(full) <= REASONING_MAX_CHARS:
        return full
    room = REASONING_MAX_CHARS - len(steps["more"])
    shown = steps["candidates"].format(candidates="")
    for position, string in enumerate(strings):
        addition = (", " if position else "") + string
        if len(shown) + len(addition) > room:
            if position == 0:  # a first candidate longer than the step: its leading words
                for word in string.split():
                    if len(shown) + len(word) + 1 > room:
                        break
                    shown += word + " "
                shown = shown.rstrip()
            break
        shown += addition
    return shown + steps["more"]


def _reasoning_steps(strings: list[str]) -> list[str]:
    """Two short unquoted steps: the candidates, then the selection (the same for every task)."""
    steps = templates.ABDUCTIVE_EXAMPLE_STEPS
    if not strings:
        return [steps["no_candidates"], steps["none_kept"]]
    if len(strings) == 1:
        return [_candidates_step(strings), steps["select_one"]]
    return [_candidates_step(strings), steps["select_many"].format(count=len(strings))]


def gold_value(record: Record, task: str, abductive: bool, answer_format: str = "compact") -> list | dict:
    """The record's gold spans as the answer value of a format (see ``answer_schema``)."""
    check_task(task)
    shape = answer_shape(task, abductive, answer_format)
    spans = target_spans(record, task)
    if shape.container == "array":
        return _unique_texts(spans)
    span_keys = shape.span_keys
    answer: dict = {}
    for key in shape.keys:
        if key == TEXT_KEY:
            answer[key] = record.text
        elif key == REASONING_KEY:
            answer[key] = _reasoning_steps(_unique_texts(spans))
        else:
            answer[key] = _unique_texts([s for s in spans if s.label == span_keys[key]])
    return [answer] if shape.container == "objects" else answer


def gold_answer(record: Record, task: str, abductive: bool, answer_format: str = "compact") -> str:
    """The record's gold spans written in the answer format the prompt asks for (JSON text)."""
    return json.dumps(gold_value(record, task, abductive, answer_format), ensure_ascii=False)
