"""E3C XMI reader: a fixture with a non-BMP character, broken files, and the real corpus counts."""

from __future__ import annotations

from collections import Counter

import pytest

from src.data.e3c import read_e3c, read_e3c_dir
from src.data.schema import DataError, check_spans
from tests.data import FIXTURES, RAW, requires_raw


def test_fixture_converts_utf16_offsets_and_reads_sentences():
    document = read_e3c(FIXTURES / "e3c_small.xml")
    assert document.doc_id == "e3c_small"
    assert document.source == "e3c"
    assert document.text == "Day 1: fever \U0001F637 for 3 days.\r\nShe recovered on 12 May."
    # the emoji is two UTF-16 units in the file's offsets, one character here
    assert [(s.text, s.label) for s in document.spans] == [
        ("fever", "EVENT"),
        ("3 days", "TIMEX"),
        ("recovered", "EVENT"),
        ("12 May", "TIMEX"),
    ]
    assert [document.text[b:e] for b, e in document.sentences] == [
        "Day 1: fever \U0001F637 for 3 days.",
        "She recovered on 12 May.",
    ]
    check_spans(document.text, document.spans, "fixture")


@pytest.mark.parametrize(
    "name, expected",
    [
        ("e3c_broken_syntax.xml", "XML syntax error"),
        ("e3c_no_sofa.xml", "expected one cas:Sofa with a sofaString, found 0"),
        ("e3c_span_outside.xml", "TIMEX3 xmi:id=103 offsets 40-99 outside the sofa text"),
    ],
)
def test_broken_files_raise_data_error_naming_the_file(name, expected):
    with pytest.raises(DataError) as info:
        read_e3c(FIXTURES / name)
    assert name in str(info.value)
    assert expected in str(info.value)


def test_annotation_of_another_view_is_an_error(tmp_path):
    path = tmp_path / "other_view.xml"
    path.write_text((FIXTURES / "e3c_small.xml").read_text(encoding="utf-8").replace(
        '<custom:EVENT xmi:id="104" sofa="12"', '<custom:EVENT xmi:id="104" sofa="13"'
    ), encoding="utf-8")
    with pytest.raises(DataError, match=r"other_view.xml: EVENT xmi:id=104 refers to sofa '13'"):
        read_e3c(path)


def test_reversed_offsets_are_an_error(tmp_path):
    path = tmp_path / "reversed.xml"
    path.write_text((FIXTURES / "e3c_small.xml").read_text(encoding="utf-8").replace(
        'begin="7" end="12" docTimeRel', 'begin="12" end="7" docTimeRel'
    ), encoding="utf-8")
    with pytest.raises(DataError, match=r"reversed.xml: EVENT xmi:id=104 offsets 12-7"):
        read_e3c(path)


@pytest.fixture(scope="module")
def e3c_documents():
    return read_e3c_dir(RAW / "e3c-en-layer1")


@requires_raw("e3c-en-layer1")
def test_real_counts_match_data_notes(e3c_documents):
    labels = Counter(span.label for document in e3c_documents for span in document.spans)
    assert len(e3c_documents) == 84
    assert labels == {"TIMEX": 380, "EVENT": 4885}
    sentences = [(d, b, e) for d in e3c_documents for b, e in d.sentences]
    assert len(sentences) == 1520
    with_timex = sum(
        any(s.label == "TIMEX" and b <= s.start and s.end <= e for s in d.spans) for d, b, e in sentences
    )
    assert with_timex == 311


@requires_raw("e3c-en-layer1")
def test_real_offsets_hold_and_sentences_contain_every_span(e3c_documents):
    for document in e3c_documents:
        check_spans(document.text, document.spans, document.doc_id)
        starts = [b for b, _ in document.sentences]
        assert starts == sorted(starts)
        for span in document.spans:
            assert sum(b <= span.start and span.end <= e for b, e in document.sentences) == 1
