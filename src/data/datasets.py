"""The datasets of the data contract built from the raw corpora (TimeBank, AQUAINT, E3C, i2b2),
and their statistics: what the prepare stage writes and the profile plan sizes."""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from src.data.e3c import read_e3c_dir
from src.data.i2b2 import read_i2b2_dir
from src.data.records import document_records, for_task, segmented_records, sentence_records
from src.data.schema import Document, Record, write_records
from src.data.segment import load_segmenter, merge_crossing
from src.data.splits import sample_in_order, split_documents
from src.data.text import words
from src.data.timeml import read_timeml_dir
from src.study import TASK_ORDER

log = logging.getLogger(__name__)


def e3c_sentences(doc: Document) -> list[tuple[int, int]]:
    """E3C's own sentence annotation, merged where a gold span crosses a boundary."""
    if not doc.sentences:
        raise ValueError(f"{doc.doc_id}: E3C document without sentence annotation")
    ranges, merged = merge_crossing(sorted(doc.sentences), doc.spans)
    if merged:
        log.info("%s: merged %d sentence boundaries crossed by spans", doc.doc_id, merged)
    return ranges


def build_datasets(cfg: dict[str, Any], seed: int) -> dict[tuple[str, str], list[Record]]:
    """All datasets of the data contract, keyed by (task, name)."""
    data = cfg["data"]
    timebank = read_timeml_dir(data["timebank_dir"])
    splits = split_documents([d.doc_id for d in timebank], data["split"]["val"], data["split"]["base"], seed)
    by_id = {d.doc_id: d for d in timebank}

    nlp = load_segmenter()
    sentences = {doc.doc_id: records for doc, records in zip(timebank, segmented_records(timebank, nlp))}
    pools = {name: [r for d in ids for r in sentences[d]] for name, ids in splits.items()}
    if data.get("add_aquaint_to_train"):
        aquaint = read_timeml_dir(data["aquaint_dir"])
        pools["train"].extend(r for records in segmented_records(aquaint, nlp) for r in records)

    clinical = [r for doc in read_e3c_dir(data["e3c_dir"]) for r in sentence_records(doc, e3c_sentences(doc))]
    cap = data["base_max_instances"]
    base_docs = sample_in_order([by_id[d] for d in splits["base"]], data["len_max_documents"], seed)

    i2b2: list[Record] = []
    if data.get("i2b2_dir") is not None:
        i2b2_docs = read_i2b2_dir(data["i2b2_dir"])
        i2b2 = [r for records in segmented_records(i2b2_docs, nlp, newline_ends_sentence=True) for r in records]

    out: dict[tuple[str, str], list[Record]] = {}
    for task in TASK_ORDER:
        out[task, "train"] = for_task(pools["train"], task)
        out[task, "val"] = for_task(pools["val"], task)
        out[task, "base"] = sample_in_order(for_task(pools["base"], task), cap, seed)
        out[task, "len"] = for_task(document_records(base_docs), task)
        t2c_cap = None if task == "timex" else data["t2c_max_event_instances"]
        out[task, "t2c"] = sample_in_order(for_task(clinical, task), t2c_cap, seed)
        if i2b2:
            out[task, "t2c_i2b2"] = sample_in_order(for_task(i2b2, task), t2c_cap, seed)
    return out


def dataset_stats(records: Sequence[Record], top: int = 10) -> dict[str, Any]:
    """Instances, spans, tokens and the most frequent gold strings (the study's Table 1)."""
    token_counts = [len(words(r.text)) for r in records]
    strings = Counter(s.text for r in records for s in r.spans)
    return {
        "instances": len(records),
        "documents": len({r.doc_id for r in records}),
        "spans": sum(len(r.spans) for r in records),
        "spans_by_label": dict(sorted(Counter(s.label for r in records for s in r.spans).items())),
        "tokens": sum(token_counts),
        "tokens_min": min(token_counts, default=0),
        "tokens_max": max(token_counts, default=0),
        "top_gold": [[text, count] for text, count in sorted(strings.items(), key=lambda kv: (-kv[1], kv[0]))[:top]],
    }


def write_datasets(datasets: dict[tuple[str, str], list[Record]], out_dir: Path) -> dict[str, Any]:
    """Write every dataset and return the statistics written to ``stats.json``."""
    stats: dict[str, Any] = {}
    for (task, name), records in sorted(datasets.items()):
        write_records(out_dir / task / f"{name}.jsonl", records)
        stats.setdefault(task, {})[name] = dataset_stats(records)
        log.info("%s/%s: %d instances", task, name, len(records))
    (out_dir / "stats.json").write_text(json.dumps(stats, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return stats
