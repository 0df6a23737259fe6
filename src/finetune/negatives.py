"""Target-free sentences of the training documents, so taggers also learn to predict nothing.

The prepare stage writes ``{task}/train.jsonl`` and ``{task}/val.jsonl`` with the sentences that
hold a target only. A tagger trained on those alone over-predicts on running text (the ``len``
documents), where most sentences hold no target. :func:`negative_sentences` rebuilds the other
sentences of the same documents from ``data/raw`` with the prepare stage's own code: the same
readers, the same seeded document split (:func:`src.data.splits.split_documents`), the same
segmenter and sentence records (:func:`src.data.records.segmented_records`), and AQUAINT in the
training pool exactly when ``data.add_aquaint_to_train`` is set. Before returning, it rebuilds
the split's *positive* sentences too and checks them against the prepared file, record by record
(id, document, text, spans), so a negative can only come from a document of that prepared split,
never from a test document; a mismatch (raw data or parameters changed since ``prepare``) is an
error that says to re-run it.

Only the documents of the train/val splits (and AQUAINT for train) are segmented, a few seconds
on a CPU; the result is cached per parameter set within a process.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from src.core.settings import params_tree
from src.data.records import for_task, segmented_records
from src.data.schema import Record, read_records
from src.data.segment import load_segmenter
from src.data.splits import split_documents
from src.data.timeml import read_timeml_dir
from src.study import SPLITS, TASK_LABELS

logger = logging.getLogger(__name__)

SENTENCE_INDEX = re.compile(r"#s(\d+)$")


def params_mapping(params: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """A parameter mapping, or the parsed parameter file it names."""
    if isinstance(params, Mapping):
        return dict(params)
    return params_tree(params)


def _pool_key(params: Mapping[str, Any]) -> str:
    """What decides the sentence pools: the seed and the data block (corpus folders, split, AQUAINT)."""
    data = params["data"]
    relevant = {
        "seed": int(params["seed"]),
        "timebank_dir": str(Path(data["timebank_dir"]).resolve()),
        "split": {"val": data["split"]["val"], "base": data["split"]["base"]},
        "aquaint_dir": str(Path(data["aquaint_dir"]).resolve()) if data.get("add_aquaint_to_train") else None,
    }
    return json.dumps(relevant, sort_keys=True)


@lru_cache(maxsize=4)
def _sentence_pools(key: str) -> tuple[dict[str, tuple[Record, ...]], tuple[str, ...]]:
    """All sentences of the train and val documents (as prepare builds them) and the test doc ids."""
    spec = json.loads(key)
    timebank = read_timeml_dir(spec["timebank_dir"])
    splits = split_documents([d.doc_id for d in timebank], spec["split"]["val"], spec["split"]["base"], spec["seed"])
    wanted = set(splits["train"]) | set(splits["val"])
    documents = [d for d in timebank if d.doc_id in wanted]
    nlp = load_segmenter()
    sentences = {doc.doc_id: records for doc, records in zip(documents, segmented_records(documents, nlp))}
    pools = {name: [r for doc_id in splits[name] for r in sentences[doc_id]] for name in SPLITS}
    if spec["aquaint_dir"] is not None:
        aquaint = read_timeml_dir(spec["aquaint_dir"])
        pools["train"].extend(r for records in segmented_records(aquaint, nlp) for r in records)
    return {name: tuple(records) for name, records in pools.items()}, tuple(splits["base"])


def sentence_pool(split: str, params: str | Path | Mapping[str, Any]) -> list[Record]:
    """Every sentence (with and without targets, all labels) of a training split's documents."""
    if split not in SPLITS:
        raise ValueError(f"negative sentences exist for the splits {SPLITS}, not {split!r}")
    pools, _ = _sentence_pools(_pool_key(params_mapping(params)))
    return list(pools[split])


def _same_record(a: Record, b: Record) -> bool:
    return (a.id, a.doc_id, a.text, sorted(a.spans)) == (b.id, b.doc_id, b.text, sorted(b.spans))


def check_against_prepared(rebuilt: list[Record], prepared: list[Record], where: str) -> None:
    """Raise ValueError unless the rebuilt positive sentences are exactly the prepared file's."""
    if len(rebuilt) != len(prepared) or not all(_same_record(a, b) for a, b in zip(rebuilt, prepared)):
        rebuilt_ids, prepared_ids = {r.id for r in rebuilt}, {r.id for r in prepared}
        first = next((f"{a.id} vs {b.id}" for a, b in zip(rebuilt, prepared) if not _same_record(a, b)), "lengths")
        raise ValueError(
            f"{where}: the sentences rebuilt from the raw corpora do not match the prepared file "
            f"({len(rebuilt)} vs {len(prepared)} records, {len(rebuilt_ids ^ prepared_ids)} ids differ, "
            f"first difference: {first}); re-run the prepare stage with these parameters"
        )


def negative_sentences(task: str, split: str, params: str | Path | Mapping[str, Any]) -> list[Record]:
    """The sentences of ``split``'s documents that hold no target of ``task`` (spans empty).

    Args:
        task: a prepared task (``timex``, ``eventx``; for ``comp``, sentences with neither label).
        split: ``train`` or ``val``.
        params: ``params.yaml`` (path or parsed): ``seed``, ``data`` and ``paths.prepared``.

    Raises:
        ValueError: the positives rebuilt from the raw corpora differ from the prepared
            ``{task}/{split}.jsonl`` (so the documents would not be the same), or a negative
            sentence belongs to a test document.
        FileNotFoundError: the prepared file does not exist.
    """
    if task not in TASK_LABELS:
        raise ValueError(f"unknown task {task!r} (expected one of {sorted(TASK_LABELS)})")
    values = params_mapping(params)
    pools, test_ids = _sentence_pools(_pool_key(values))
    if split not in pools:
        raise ValueError(f"negative sentences exist for the splits {SPLITS}, not {split!r}")
    pool = list(pools[split])
    prepared_path = Path(values["paths"]["prepared"]) / task / f"{split}.jsonl"
    if not prepared_path.is_file():
        raise FileNotFoundError(f"{prepared_path} does not exist (run the prepare stage first)")
    check_against_prepared(for_task(pool, task), read_records(prepared_path), str(prepared_path))
    labels = TASK_LABELS[task]
    negatives = [
        Record(r.id, r.doc_id, r.text, [], r.source) for r in pool if not any(s.label in labels for s in r.spans)
    ]
    leaked = {r.doc_id for r in negatives} & set(test_ids)
    if leaked:
        raise ValueError(f"negative sentences from test documents: {sorted(leaked)[:5]}")
    logger.info(
        "%s/%s: %d target-free sentences from %d documents",
        task,
        split,
        len(negatives),
        len({r.doc_id for r in negatives}),
    )
    return negatives


def sentence_order(record: Record) -> tuple[str, int, str]:
    """Sort key that puts sentences back in document order (``{doc_id}#s{index}`` ids)."""
    match = SENTENCE_INDEX.search(record.id)
    return (record.doc_id, int(match.group(1)) if match else -1, record.id)


def with_negatives(positives: list[Record], negatives: list[Record], limit: int | None = None) -> list[Record]:
    """Positives and negatives in document order; with ``limit``, the first ``limit`` positives
    and the negatives of the documents those come from (the ratio of the full split)."""
    if limit is not None:
        positives = positives[:limit]
        documents = {r.doc_id for r in positives}
        negatives = [r for r in negatives if r.doc_id in documents]
    ids = {r.id for r in positives}
    clash = [r.id for r in negatives if r.id in ids]
    if clash:
        raise ValueError(f"sentences both with and without targets: {clash[:5]}")
    return sorted([*positives, *negatives], key=sentence_order)
