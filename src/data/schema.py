"""The project's data contract: documents, records and their JSONL form.

Every prepared dataset is a JSONL file of records
``{"id", "doc_id", "text", "spans": [{"start", "end", "text", "label"}], "source"}``
with ``text[start:end] == span.text``; readers and later stages rely on these
types so that the invariant is checked in one place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

LABELS = ("TIMEX", "EVENT")
RECORD_KEYS = ("id", "doc_id", "text", "spans", "source")


class DataError(ValueError):
    """A corpus or dataset file that cannot be read; the message names the file (and line)."""

    def __init__(self, path: str | Path, message: str, line: int | None = None):
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.line = line


@dataclass(frozen=True, order=True)
class Span:
    """A labelled character span; ``end`` is exclusive."""

    start: int
    end: int
    text: str
    label: str

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "text": self.text, "label": self.label}


@dataclass
class Document:
    """A whole annotated document as a reader returns it.

    ``sentences`` holds (start, end) character ranges when the corpus provides them
    (E3C), else None (TimeBank, segmented later). ``dct`` is the document creation
    time value when known; the DCT span itself is not part of ``spans``.
    """

    doc_id: str
    text: str
    spans: list[Span]
    source: str
    dct: str | None = None
    sentences: list[tuple[int, int]] | None = None


@dataclass
class Record:
    """One dataset instance (a sentence or a whole document) with its gold spans."""

    id: str
    doc_id: str
    text: str
    spans: list[Span]
    source: str
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "doc_id": self.doc_id,
            "text": self.text,
            "spans": [s.to_dict() for s in self.spans],
            "source": self.source,
        }
        out.update(self.extra)
        return out

    def gold_strings(self) -> list[str]:
        return [s.text for s in self.spans]


def check_spans(text: str, spans: Iterable[Span], where: str) -> None:
    """Raise ValueError unless every span lies in ``text`` and matches its string."""
    for span in spans:
        if span.label not in LABELS:
            raise ValueError(f"{where}: unknown label {span.label!r} (expected one of {LABELS})")
        if not (0 <= span.start < span.end <= len(text)):
            raise ValueError(f"{where}: span {span.start}-{span.end} outside text of length {len(text)}")
        if text[span.start : span.end] != span.text:
            raise ValueError(
                f"{where}: offsets {span.start}-{span.end} give {text[span.start:span.end]!r}, "
                f"not the span text {span.text!r}"
            )


def record_from_dict(obj: Any, path: str | Path = "<record>", line: int | None = None) -> Record:
    """Validate one decoded JSON object against the data contract."""
    if not isinstance(obj, dict):
        raise DataError(path, f"expected a JSON object, got {type(obj).__name__}", line)
    missing = [k for k in RECORD_KEYS if k not in obj]
    if missing:
        raise DataError(path, f"missing key(s) {', '.join(missing)}", line)
    for key in ("id", "doc_id", "text", "source"):
        if not isinstance(obj[key], str):
            raise DataError(path, f"{key!r} must be a string", line)
    if not isinstance(obj["spans"], list):
        raise DataError(path, "'spans' must be a list", line)
    spans = []
    for i, raw in enumerate(obj["spans"]):
        try:
            spans.append(Span(int(raw["start"]), int(raw["end"]), str(raw["text"]), str(raw["label"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(path, f"span {i} is malformed ({exc!r})", line) from None
    try:
        check_spans(obj["text"], spans, f"record {obj['id']!r}")
    except ValueError as exc:
        raise DataError(path, str(exc), line) from None
    extra = {k: v for k, v in obj.items() if k not in RECORD_KEYS}
    return Record(obj["id"], obj["doc_id"], obj["text"], spans, obj["source"], extra)


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, Any]]:
    """Yield (line number, decoded object) for each non-blank line; bad JSON names the line."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(path, f"invalid JSON ({exc.msg})", number) from None


def read_records(path: str | Path) -> list[Record]:
    """Read and validate a dataset file; duplicated ids are an error."""
    records: list[Record] = []
    seen: dict[str, int] = {}
    for number, obj in iter_jsonl(path):
        record = record_from_dict(obj, path, number)
        if record.id in seen:
            raise DataError(path, f"duplicated id {record.id!r} (first on line {seen[record.id]})", number)
        seen[record.id] = number
        records.append(record)
    return records


def write_records(path: str | Path, records: Iterable[Record]) -> int:
    """Write records as JSONL (stable key order, UTF-8); returns how many were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with open(path, "w", encoding="utf-8") as handle:
        for record in records:
            check_spans(record.text, record.spans, f"record {record.id!r}")
            handle.write(json.dumps(record.to_dict(), ensure_ascii=False) + "\n")
            count += 1
    return count


def corpus_files(directory: str | Path, suffix: str, hint: str = "") -> list[Path]:
    """The ``*{suffix}`` files of a corpus folder, sorted by name; a missing or empty folder is a DataError."""
    directory = Path(directory)
    if not directory.is_dir():
        raise DataError(directory, "not a directory" + (f" ({hint})" if hint else ""))
    paths = sorted(directory.glob(f"*{suffix}"), key=lambda p: p.name)
    if not paths:
        raise DataError(directory, f"no {suffix} files")
    return paths
