"""JSON Lines read as the format says (jsonlines.org), not as ``str.splitlines`` would.

A record ends at ``\\n`` only (a ``\\r`` before it belongs to the terminator): characters that
``splitlines`` also breaks on (U+2028, U+2029, U+0085, form feeds...) are legal inside a JSON
string and stay there. Each line is UTF-8 on its own, so one line of bytes that are not UTF-8
(or not JSON) is counted as unreadable while every other line is still read; a UTF-8 byte-order
mark at the start of the file is skipped. A batch output file read any other way turns billed
answers into "no line for this request", settled as unbilled and bought again.
"""

from __future__ import annotations

import codecs
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class JsonLines:
    """The records of one file, in order, and how many non-blank lines could not be read."""

    records: list[Any] = field(default_factory=list)
    unreadable: int = 0


def read_json_lines(data: bytes) -> JsonLines:
    """Every record of a JSON Lines file (module doc); blank lines are skipped."""
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    out = JsonLines()
    for raw in data.split(b"\n"):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if not raw.strip():
            continue
        try:
            out.records.append(json.loads(raw.decode("utf-8")))
        except (UnicodeDecodeError, ValueError):
            out.unreadable += 1
    return out
