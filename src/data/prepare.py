"""The ``prepare`` stage: raw corpora -> the JSONL datasets of the data contract.

Writes ``data/prepared/{task}/{name}.jsonl`` for task in timex/eventx/comp and name in
train/val/base/len/t2c (plus t2c_i2b2 when an i2b2 path is configured), and
``data/prepared/stats.json``. Usage: ``python -m src.data.prepare [--params params.yaml]``.
"""

from __future__ import annotations

import src.numerics_first  # noqa: F401  # isort: skip  (first: a stage's process is pinned before any library loads)
import argparse
import json
import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from src.cli import setup_logging
from src.data.e3c import read_e3c_dir
from src.data.i2b2 import read_i2b2_dir
from src.data.schema import Document, Record, Span, write_records
from src.data.segment import load_segmenter, merge_crossing, segment_documents
from src.data.splits import sample_in_order, split_documents
from src.data.text import words
from src.data.timeml import read_timeml_dir
from src.study import TASK_LABELS, TASK_ORDER

log = logging.getLogger(__name__)


def cut(doc: Document, start: int, end: int, record_id: str) -> Record:
    """The record for ``doc.text[start:end]`` (whitespace trimmed) with the spans inside it."""
    piece = doc.text[start:end]
    start += len(piece) - len(piece.lstrip())
    end -= len(piece) - len(piece.rstrip())
    spans = [
        Span(s.start - start, s.end - start, s.text, s.label)
        for s in sorted(doc.spans)
        if start <= s.start and s.end <= end
    ]
    return Record(record_id, doc.doc_id, doc.text[start:end], spans, doc.source)


def sentence_records(doc: Document, ranges: Sequence[tuple[int, int]]) -> list[Record]:
    """One record per sentence range, ids ``{doc_id}#s{index}``; every span must fall in one sentence."""
    records = [cut(doc, start, end, f"{doc.doc_id}#s{i}") for i, (start, end) in enumerate(ranges)]
    kept = sum(len(r.spans) for r in records)
    if kept != len(doc.spans):
        raise ValueError(f"{doc.doc_id}: {len(doc.spans) - kept} span(s) fall outside every sentence")
    return [r for r in records if r.text]


def segmented_records(docs: Sequence[Document], nlp, newline_ends_sentence: bool = False) -> list[list[Record]]:
    """Sentence records of documents without sentence annotation (one spaCy pass over all).

    ``newline_ends_sentence`` suits clinical notes written one sentence per line (i2b2).
    """
    ranges, merges = segment_documents(docs, nlp, newline_ends_sentence=newline_ends_sentence)
    if merges:
        log.info("segmentation: merged %d sentence boundaries that cut a gold span", merges)
    return [sentence_records(doc, doc_ranges) for doc, doc_ranges in zip(docs, ranges)]


def for_task(records: Iterable[Record], task: str) -> list[Record]:
    """Keep only the task's labels, and only records holding every label the task needs."""
    labels = TASK_LABELS[task]
    out = []
    for record in records:
        spans = [s for s in record.spans if s.label in labels]
        if all(any(s.label == label for s in spans) for label in labels):
            out.append(Record(record.id, record.doc_id, record.text, spans, record.source, dict(record.extra)))
    return out


def document_records(docs: Iterable[Document]) -> list[Record]:
    """Whole documents as single instances (the structural ``len`` dimension)."""
    return [cut(doc, 0, len(doc.text), doc.doc_id) for doc in docs]


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml", help="parameter file (the data and seed keys)")
    args = parser.parse_args(argv)
    setup_logging()
    cfg = yaml.safe_load(Path(args.params).read_text(encoding="utf-8"))
    datasets = build_datasets(cfg, int(cfg["seed"]))
    write_datasets(datasets, Path(cfg["paths"]["prepared"]))


if __name__ == "__main__":
    main()
