"""TimeML reader: fixtures with nested markup, broken files, and the real TimeBank/TBAQ counts."""

from __future__ import annotations

import re
import shutil
from collections import Counter

import pytest

from src.core.errors import DataError
from src.data.schema import check_spans
from src.data.timeml import read_timeml, read_timeml_dir
from tests.helpers.paths import FIXTURES, RAW, requires_raw


def spans_by_label(document):
    return {label: [s.text for s in document.spans if s.label == label] for label in ("TIMEX", "EVENT")}


def test_pure_timeml_drops_dct_links_and_keeps_nested_spans():
    document = read_timeml(FIXTURES / "timeml_nested.tml")
    assert document.doc_id == "timeml_nested"
    assert document.source == "timebank"
    assert document.dct == "1998-01-08"
    assert document.text == (
        "The bank reported losses on the eve of Jan. 8\n and  closed  its doors two days later.\n\n"
        " Markets fell & then rose."
    )
    # the DCT's header line (with a stray "Y") and the wire trailer are not document text
    assert "19980108" not in document.text and "Y" not in document.text
    assert "PROFILE" not in document.text and "1830EST" not in document.text
    assert spans_by_label(document) == {
        "TIMEX": ["on the eve of Jan. 8", "two days"],
        "EVENT": ["reported", "closed", "fell & then rose"],
    }
    check_spans(document.text, document.spans, "fixture")
    assert document.spans == sorted(document.spans)
    assert document.sentences is None


def test_tbaq_layout_reads_only_the_text_element():
    document = read_timeml(FIXTURES / "timeml_tbaq.tml")
    assert document.text == "Bombs exploded Friday, after a warning."
    assert document.dct == "1998-08-07"
    assert document.source == "tbaq-timebank"
    assert spans_by_label(document) == {"TIMEX": ["Friday"], "EVENT": ["exploded", "warning"]}
    assert read_timeml(FIXTURES / "timeml_tbaq.tml", source="custom").source == "custom"


def test_aquaint_source_comes_from_the_folder(tmp_path):
    folder = tmp_path / "AQUAINT"
    folder.mkdir()
    shutil.copy(FIXTURES / "timeml_tbaq.tml", folder / "APW_FIXTURE.tml")
    [document] = read_timeml_dir(folder)
    assert (document.doc_id, document.source) == ("APW_FIXTURE", "aquaint")


@pytest.mark.parametrize(
    "name, expected",
    [
        ("timeml_broken_syntax.tml", "XML syntax error: mismatched tag"),
        ("timeml_no_text.tml", "without a <TEXT> element"),
        ("timeml_empty_event.tml", "EVENT e7 has no text"),
    ],
)
def test_broken_files_raise_data_error_naming_the_file(name, expected):
    with pytest.raises(DataError) as info:
        read_timeml(FIXTURES / name)
    assert name in str(info.value)
    assert expected in str(info.value)


def test_syntax_error_reports_the_line():
    with pytest.raises(DataError) as info:
        read_timeml(FIXTURES / "timeml_broken_syntax.tml")
    assert info.value.line == 6
    assert "timeml_broken_syntax.tml:6:" in str(info.value)


def test_wrong_root_and_missing_folder(tmp_path):
    path = tmp_path / "other.tml"
    path.write_text("<root>text</root>")
    with pytest.raises(DataError, match="other.tml: root element is <root>"):
        read_timeml(path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="no .tml files"):
        read_timeml_dir(empty)
    with pytest.raises(DataError, match="not a directory"):
        read_timeml_dir(tmp_path / "absent")


# Counts measured independently of this reader (DATA.md): TIMEX here excludes the DCT.
REAL_FOLDERS = [
    ("timebank-1.2", 183, 1231, 7932, "timebank"),
    ("tbaq-cleaned/TimeBank", 183, 1243, 6698, "tbaq-timebank"),
    ("tbaq-cleaned/AQUAINT", 73, 579, 4431, "aquaint"),
]


@pytest.fixture(scope="module")
def real_corpora():
    return {folder: read_timeml_dir(RAW / folder) for folder, *_ in REAL_FOLDERS if (RAW / folder).is_dir()}


@requires_raw("timebank-1.2")
@requires_raw("tbaq-cleaned")
@pytest.mark.parametrize("folder, documents, timex, events, source", REAL_FOLDERS)
def test_real_counts_match_data_notes(real_corpora, folder, documents, timex, events, source):
    docs = real_corpora[folder]
    labels = Counter(span.label for document in docs for span in document.spans)
    assert len(docs) == documents
    assert labels == {"TIMEX": timex, "EVENT": events}
    assert {document.source for document in docs} == {source}
    assert all(document.dct for document in docs)
    assert [d.doc_id for d in docs] == sorted(d.doc_id for d in docs)
    assert len({d.doc_id for d in docs}) == documents


@requires_raw("timebank-1.2")
@requires_raw("tbaq-cleaned")
def test_real_offsets_hold_for_every_span(real_corpora):
    for docs in real_corpora.values():
        for document in docs:
            check_spans(document.text, document.spans, document.doc_id)
            assert document.text == document.text.strip()
            for span in document.spans:
                assert span.text == span.text.strip() and span.text


@requires_raw("timebank-1.2")
def test_timebank_dct_is_left_out_of_the_text(real_corpora):
    docs = {d.doc_id: d for d in real_corpora["timebank-1.2"]}
    first = docs["ABC19980108.1830.0711"]
    assert first.dct == "1998-01-08"
    assert first.text.startswith("On the other hand, it's turning out")
    # the one file whose DCT follows the body: the date line is dropped from the end
    trailing = docs["SJMN91-06338157"]
    assert trailing.dct == "1991-12-03"
    assert trailing.text.endswith("the outcome of that session was unclear.")
    assert "December 3, 1991" not in trailing.text
    # the only DCT line with text after the date ("19980501</TIMEX3>Y")
    assert docs["VOA19980501.1800.0355"].text.startswith("Israeli Prime Minister")
    # PUBLICATION_TIME serves as DCT in 15 WSJ files
    assert docs["wsj_0150"].dct == "1989-11-02"
    assert not docs["wsj_0150"].text.startswith("11/02/89")


@requires_raw("timebank-1.2")
def test_timebank_wire_trailers_are_cut(real_corpora):
    docs = {d.doc_id: d for d in real_corpora["timebank-1.2"]}
    assert not [d for d in docs.values() if "(PROFILE" in d.text or re.search(r"\d{4}E[SD]T$", d.text)]
    assert docs["APW19980213.1310"].text.endswith("can no longer serve us appropriately,'' Keating said.")
    assert docs["NYT19980206.0460"].text.endswith("and\ncollege graduates, 1.9 percent.")


@pytest.mark.parametrize(
    "name, expected",
    [
        (
            "timeml_two_dcts.tml",
            "expected exactly one creation time TIMEX3 (functionInDocument CREATION_TIME or "
            "PUBLICATION_TIME), found 2, TIMEX3 t0, TIMEX3 t9",
        ),
        (
            "timeml_no_dct.tml",
            "expected exactly one creation time TIMEX3 (functionInDocument CREATION_TIME or PUBLICATION_TIME), found 0",
        ),
        ("timeml_event_in_dct.tml", "EVENT e5 is nested inside the creation time TIMEX3 t0"),
        ("timeml_tbaq_dct_in_text.tml", "TIMEX3 t5 in <TEXT> is a second creation time (the DCT is in <DCT>)"),
    ],
)
def test_creation_time_rules(name, expected):
    # before: a second DCT became an ordinary TIMEX span, an EVENT inside the DCT was dropped
    with pytest.raises(DataError) as info:
        read_timeml(FIXTURES / name)
    assert str(info.value) == f"{FIXTURES / name}: {expected}"


def test_tbaq_dct_element_must_hold_one_timex(tmp_path):
    text = (FIXTURES / "timeml_tbaq.tml").read_text(encoding="utf-8")
    path = tmp_path / "empty_dct.tml"
    path.write_text(re.sub(r"<DCT>.*</DCT>", "<DCT></DCT>", text), encoding="utf-8")
    with pytest.raises(DataError, match=r"empty_dct.tml: expected exactly one creation time TIMEX3 in <DCT>, found 0"):
        read_timeml(path)
    path = tmp_path / "two_dct.tml"
    path.write_text(text.replace("<TITLE>", "<DCT/><TITLE>"), encoding="utf-8")
    with pytest.raises(DataError, match=r"two_dct.tml: expected one <DCT> element, found 2"):
        read_timeml(path)


def test_utf8_timeml_declared_latin1_is_an_error(tmp_path):
    path = tmp_path / "declared_latin1.tml"
    text = (
        (FIXTURES / "timeml_tbaq.tml")
        .read_text(encoding="utf-8")
        .replace('Bombs <EVENT eid="e1"', 'Bombes à Nairobi <EVENT eid="e1"')
    )
    path.write_bytes(
        text.replace('<?xml version="1.0" ?>', '<?xml version="1.0" encoding="ISO-8859-1"?>').encode("utf-8")
    )
    with pytest.raises(DataError, match=r"declared_latin1.tml:\d+: declares encoding 'ISO-8859-1' but its non-ASCII"):
        read_timeml(path)
    path.write_bytes(text.encode("utf-8"))  # no declaration: UTF-8, read correctly
    assert read_timeml(path).text.startswith("Bombes à Nairobi exploded")
