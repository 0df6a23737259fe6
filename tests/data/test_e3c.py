"""E3C XMI reader: a fixture with a non-BMP character, broken files, and the real corpus counts."""

from __future__ import annotations

from collections import Counter

import pytest

from src.core.errors import DataError
from src.data.e3c import read_e3c, read_e3c_dir
from src.data.schema import check_spans
from tests.helpers.paths import FIXTURES, RAW, requires_raw


def test_fixture_converts_utf16_offsets_and_reads_sentences():
    document = read_e3c(FIXTURES / "e3c_small.xml")
    assert document.doc_id == "e3c_small"
    assert document.source == "e3c"
    assert document.text == "Day 1: fever \U0001f637 for 3 days.\r\nShe recovered on 12 May."
    # the emoji is two UTF-16 units in the file's offsets, one character here
    assert [(s.text, s.label) for s in document.spans] == [
        ("fever", "EVENT"),
        ("3 days", "TIMEX"),
        ("recovered", "EVENT"),
        ("12 May", "TIMEX"),
    ]
    assert [document.text[b:e] for b, e in document.sentences] == [
        "Day 1: fever \U0001f637 for 3 days.",
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
    path.write_text(
        (FIXTURES / "e3c_small.xml")
        .read_text(encoding="utf-8")
        .replace('<custom:EVENT xmi:id="104" sofa="12"', '<custom:EVENT xmi:id="104" sofa="13"'),
        encoding="utf-8",
    )
    with pytest.raises(DataError, match=r"other_view.xml: EVENT xmi:id=104 refers to sofa '13'"):
        read_e3c(path)


def test_reversed_offsets_are_an_error(tmp_path):
    path = tmp_path / "reversed.xml"
    path.write_text(
        (FIXTURES / "e3c_small.xml")
        .read_text(encoding="utf-8")
        .replace('begin="7" end="12" docTimeRel', 'begin="12" end="7" docTimeRel'),
        encoding="utf-8",
    )
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
    with_timex = sum(any(s.label == "TIMEX" and b <= s.start and s.end <= e for s in d.spans) for d, b, e in sentences)
    assert with_timex == 311


@requires_raw("e3c-en-layer1")
def test_real_offsets_hold_and_sentences_contain_every_span(e3c_documents):
    for document in e3c_documents:
        check_spans(document.text, document.spans, document.doc_id)
        starts = [b for b, _ in document.sentences]
        assert starts == sorted(starts)
        for span in document.spans:
            assert sum(b <= span.start and span.end <= e for b, e in document.sentences) == 1


def test_utf8_file_declared_latin1_is_an_error_not_a_shift():
    # read as declared, "è" would become two characters and every later span would move
    # ("fever" read as "e: fe"); the mismatch is caught before any offset is used
    with pytest.raises(DataError) as info:
        read_e3c(FIXTURES / "e3c_wrong_encoding.xml")
    message = str(info.value)
    assert "e3c_wrong_encoding.xml:9: declares encoding 'ISO-8859-1'" in message  # line of the first "è"
    assert "are UTF-8" in message


def test_same_file_declared_utf8_reads_correctly(tmp_path):
    path = tmp_path / "right_encoding.xml"
    path.write_bytes((FIXTURES / "e3c_wrong_encoding.xml").read_bytes().replace(b"ISO-8859-1", b"UTF-8", 1))
    document = read_e3c(path)
    assert [s.text for s in document.spans] == ["fever", "3 days", "recovered", "12 May"]


def test_latin1_file_declared_latin1_reads_correctly(tmp_path):
    path = tmp_path / "latin1.xml"
    path.write_bytes((FIXTURES / "e3c_wrong_encoding.xml").read_text(encoding="utf-8").encode("latin-1"))
    document = read_e3c(path)
    assert document.text.startswith("Fièvre café")
    assert [s.text for s in document.spans] == ["fever", "3 days", "recovered", "12 May"]


@pytest.mark.parametrize(
    "old, new, expected",
    [
        # the EVENT "fever" (7-12) moved by one or two characters either way
        (
            'begin="7" end="12" docTimeRel',
            'begin="8" end="13" docTimeRel',
            "EVENT xmi:id=104 offsets 8-13 starts inside a word",
        ),
        (
            'begin="7" end="12" docTimeRel',
            'begin="5" end="10" docTimeRel',
            "EVENT xmi:id=104 offsets 5-10 ends inside a word",
        ),
        (
            'begin="7" end="12" docTimeRel',
            'begin="6" end="12" docTimeRel',
            "EVENT xmi:id=104 offsets 6-12 covers ' fever'",
        ),
        # a sentence moved into its first word
        ('begin="29" end="53"', 'begin="30" end="53"', "Sentence xmi:id=101 offsets 30-53 starts inside a word"),
    ],
)
def test_shifted_offsets_are_an_error(tmp_path, old, new, expected):
    path = tmp_path / "shifted.xml"
    text = (FIXTURES / "e3c_small.xml").read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new), encoding="utf-8")
    with pytest.raises(DataError) as info:
        read_e3c(path)
    assert str(info.value).startswith(f"{path}: ")
    assert expected in str(info.value)


def test_offset_checks_catch_a_wrong_decoding_on_their_own(monkeypatch):
    # without the declaration check, the Latin-1 reading of UTF-8 text misaligns the sentences and spans
    import src.data.timeml

    monkeypatch.setattr(src.data.timeml, "check_declared_encoding", lambda path, data: None)
    with pytest.raises(DataError, match=r"e3c_wrong_encoding.xml: Sentence xmi:id=100 offsets 0-30 ends inside a word"):
        read_e3c(FIXTURES / "e3c_wrong_encoding.xml")
