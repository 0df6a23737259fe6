"""JSON Lines files drawn by hypothesis: whatever the format allows is read back record for record."""

from __future__ import annotations

import codecs
import json

from hypothesis import given, settings, strategies as st

from src.backends.json_lines import read_json_lines

#: Characters str.splitlines breaks on, legal inside a JSON string.
BREAKERS = "\u2028\u2029\u0085\x0b\x0c\x1c\x1d\x1e\r"

text = st.text(st.characters(exclude_categories=("Cs",)) | st.sampled_from(BREAKERS), max_size=20)
scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False) | text
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4))
records = st.lists(st.dictionaries(text, values, min_size=1, max_size=4), max_size=8)


@st.composite
def files(draw) -> tuple[list, bytes]:
    """Records and one of the files the format allows for them: LF or CRLF, ASCII-escaped or raw
    UTF-8, blank lines anywhere, with or without a final newline and a byte-order mark."""
    items = draw(records)
    ascii_only = draw(st.booleans())
    lines = [json.dumps(item, ensure_ascii=ascii_only) for item in items]
    out = []
    for line in lines:
        out += [""] * draw(st.integers(0, 1)) + [line]
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    body = ending.join(out) + (ending if draw(st.booleans()) else "")
    data = body.encode("utf-8")
    return items, (codecs.BOM_UTF8 + data) if draw(st.booleans()) else data


@settings(max_examples=150, deadline=None, derandomize=True)
@given(files())
def test_every_record_of_any_legal_file_is_read(drawn):
    items, data = drawn
    read = read_json_lines(data)
    assert read.unreadable == 0 and read.records == items


@settings(max_examples=60, deadline=None, derandomize=True)
@given(records, st.integers(0, 8), st.binary(min_size=1, max_size=6))
def test_a_line_of_bytes_that_are_not_utf8_costs_that_line_only(items, where, junk):
    lines = [json.dumps(item, ensure_ascii=False).encode("utf-8") for item in items]
    bad = b'{"custom_id": "x", "text": "' + junk.replace(b"\n", b"") + b'\xff"}'
    where = min(where, len(lines))
    read = read_json_lines(b"\n".join(lines[:where] + [bad] + lines[where:]))
    assert read.unreadable == 1 and read.records == items


def test_the_cases_splitlines_got_wrong():
    """Issue 48: a BOM before the file, a line separator inside an answer."""
    line = {"custom_id": "r1", "response": {"status_code": 200, "body": {"text": "a\u2028b"}}}
    data = codecs.BOM_UTF8 + (json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8")
    assert read_json_lines(data).records == [line]
    assert len([x for x in data.decode("utf-8").splitlines() if x.strip()]) == 2  # what the old reader saw
