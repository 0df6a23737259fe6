"""The project's data contract: documents, records and their JSONL form.

Every prepared dataset is a JSONL file of records
``{"id", "doc_id", "text", "spans": [{"start", "end", "text", "label"}], "source"}``
with ``text[start:end] == span.text``; readers and later stages rely on these
types so that the invariant is checked in one place.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from src.core.errors import DataError
from src.study import LABELS

RECORD_KEYS = ("id", "doc_id", "text", "spans", "source")
SPAN_KEYS = ("start", "end", "text", "label")
WORD_CHARACTER = re.compile(r"\w")
MAX_INTEGER_DIGITS = 100  # far beyond any offset or count; Python refuses 4,300+ digits anyway


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
            raise ValueError(f"{where}: unknown label {short_repr(span.label)} (expected one of {LABELS})")
        if not span.start < span.end:
            raise ValueError(f"{where}: span {span.start}-{span.end} is empty or reversed (start must be < end)")
        if not (0 <= span.start and span.end <= len(text)):
            raise ValueError(f"{where}: span {span.start}-{span.end} outside text of length {len(text)}")
        if text[span.start : span.end] != span.text:
            raise ValueError(
                f"{where}: offsets {span.start}-{span.end} give {short_repr(text[span.start : span.end])}, "
                f"not the span text {short_repr(span.text)}"
            )


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters: error messages stay one short line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _offset(raw: dict, key: str, where: str) -> int:
    """A span offset: a JSON integer (not a boolean, not a float), non-negative."""
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}.{key} must be an integer, got {short_repr(value)}")
    if value < 0:
        raise ValueError(f"{where}.{key} must be >= 0, got {short_repr(value)}")
    return value


def span_from_dict(raw: Any, where: str) -> Span:
    """Validate one span object's keys and types (``where`` names it, e.g. ``spans[2]``)."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be a JSON object, got {type(raw).__name__}")
    missing = [k for k in SPAN_KEYS if k not in raw]
    if missing:
        raise ValueError(f"{where} is missing key(s) {', '.join(missing)}")
    start, end = _offset(raw, "start", where), _offset(raw, "end", where)
    for key in ("text", "label"):
        if not isinstance(raw[key], str):
            raise ValueError(f"{where}.{key} must be a string, got {short_repr(raw[key])}")
    return Span(start, end, raw["text"], raw["label"])


def check_gold_spans(spans: Iterable[Span], where: str) -> None:
    """Gold-only rules: a span must hold a word character, and no (start, end, label) twice."""
    seen: dict[tuple[int, int, str], int] = {}
    for i, span in enumerate(spans):
        if not WORD_CHARACTER.search(span.text):
            raise ValueError(f"{where} spans[{i}] {short_repr(span.text)} has no word character, so it can never match")
        key = (span.start, span.end, span.label)
        if key in seen:
            raise ValueError(f"{where} spans[{i}] repeats spans[{seen[key]}] ({span.start}-{span.end} {span.label})")
        seen[key] = i


def record_from_dict(obj: Any, path: str | Path = "<record>", line: int | None = None) -> Record:
    """Validate one decoded JSON object against the data contract (types, offsets, gold rules)."""
    if not isinstance(obj, dict):
        raise DataError(path, f"expected a JSON object, got {type(obj).__name__}", line)
    missing = [k for k in RECORD_KEYS if k not in obj]
    if missing:
        raise DataError(path, f"missing key(s) {', '.join(missing)}", line)
    for key in ("id", "doc_id", "text", "source"):
        if not isinstance(obj[key], str):
            raise DataError(path, f"{key!r} must be a string, got {short_repr(obj[key])}", line)
    if not isinstance(obj["spans"], list):
        raise DataError(path, f"'spans' must be a list, got {type(obj['spans']).__name__}", line)
    where = f"record {short_repr(obj['id'])}"
    try:
        spans = [span_from_dict(raw, f"{where} spans[{i}]") for i, raw in enumerate(obj["spans"])]
        check_spans(obj["text"], spans, where)
        check_gold_spans(spans, where)
    except ValueError as exc:
        raise DataError(path, str(exc), line) from None
    extra = {k: v for k, v in obj.items() if k not in RECORD_KEYS}
    return Record(obj["id"], obj["doc_id"], obj["text"], spans, obj["source"], extra)


class _JSONValueError(ValueError):
    """A JSON value that decodes but breaks a project rule (duplicate key, non-finite number)."""


def _object_without_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _JSONValueError(f"duplicated key {short_repr(key)}")
        out[key] = value
    return out


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _JSONValueError(f"number {short_repr(text)} is out of range")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise _JSONValueError(f"integer with {len(text.lstrip('-'))} digits is out of range")
    return int(text)


def _no_constant(name: str) -> Any:
    raise _JSONValueError(f"{name} is not valid JSON (numbers must be finite)")


def decode_json_line(line: str) -> Any:
    """``json.loads`` under the project's rules: no duplicate keys, no NaN/Infinity, bounded numbers.

    Raises:
        ValueError: the line is not JSON, breaks one of those rules or nests too deeply.
    """
    try:
        return json.loads(
            line,
            object_pairs_hook=_object_without_duplicate_keys,
            parse_float=_finite_float,
            parse_int=_bounded_int,
            parse_constant=_no_constant,
        )
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON ({exc.msg} at column {exc.colno})") from None
    except _JSONValueError as exc:
        raise ValueError(f"invalid JSON ({exc})") from None
    except RecursionError:
        raise ValueError("invalid JSON (nested too deeply)") from None


def _decoded_line(path: str | Path, number: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        byte = raw[exc.start : exc.start + 1].hex()
        raise DataError(path, f"not UTF-8 text (byte 0x{byte} at column {exc.start + 1})", number) from None


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, Any]]:
    """Yield (line number, decoded object) for each line of a UTF-8 JSONL file.

    Lines are split on ``\\n`` only. Blank lines at the end of the file are ignored; a blank
    line followed by more data is an error, like any undecodable byte, invalid JSON, a
    duplicated key, a non-finite number or an unreadable file: a DataError naming file and line.
    """
    try:
        with open(path, "rb") as handle:
            blank: int | None = None
            for number, raw in enumerate(handle, start=1):
                line = _decoded_line(path, number, raw)
                if not line.strip():
                    blank = blank or number
                    continue
                if blank is not None:
                    raise DataError(path, "blank line inside the file (JSONL has one object per line)", blank)
                try:
                    yield number, decode_json_line(line)
                except ValueError as exc:
                    raise DataError(path, str(exc), number) from None
    except OSError as exc:
        raise DataError(path, f"cannot read file ({exc.strerror or exc})") from None


def read_numbered_records(path: str | Path) -> list[tuple[int, Record]]:
    """Read and validate a dataset file as (line number, record) pairs; duplicated ids are an error."""
    records: list[tuple[int, Record]] = []
    seen: dict[str, int] = {}
    for number, obj in iter_jsonl(path):
        record = record_from_dict(obj, path, number)
        if record.id in seen:
            raise DataError(path, f"duplicated id {short_repr(record.id)} (first on line {seen[record.id]})", number)
        seen[record.id] = number
        records.append((number, record))
    return records


def read_records(path: str | Path) -> list[Record]:
    """Read and validate a dataset file; duplicated ids are an error."""
    return [record for _, record in read_numbered_records(path)]


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
