"""i2b2 2012 reader, on fixtures written in the corpus's format (the corpus itself is not redistributable)."""

from __future__ import annotations

import shutil

import pytest

from src.core.errors import DataError
from src.data.i2b2 import escape_bare_ampersands, read_i2b2, read_i2b2_dir
from src.data.schema import check_spans
from tests.helpers.paths import FIXTURES


def test_fixture_reads_spans_at_their_offsets():
    document = read_i2b2(FIXTURES / "i2b2_small.xml")
    assert document.doc_id == "i2b2_small"
    assert document.source == "i2b2"
    assert document.text.startswith("\nAdmission Date :\n2012-03-01\n")
    assert document.text[1:10] == "Admission"
    assert [(s.start, s.end, s.text, s.label) for s in document.spans] == [
        (1, 10, "Admission", "EVENT"),
        (18, 28, "2012-03-01", "TIMEX"),
        (29, 38, "Discharge", "EVENT"),
        (46, 56, "2012-03-05", "TIMEX"),
        (102, 110, "admitted", "EVENT"),
        # the text attribute's line break was normalised to a space by XML; the span keeps the text
        (116, 148, "chest pain & shortness of\nbreath", "EVENT"),
        (153, 161, "two days", "TIMEX"),
        (178, 187, "a CT scan", "EVENT"),  # annotated twice (E4, E5), kept once
        (191, 205, "hospital day 2", "TIMEX"),
    ]
    # the zero-length E6 is skipped; SECTIME and TLINK add nothing
    check_spans(document.text, document.spans, "fixture")


def test_bare_ampersand_is_a_syntax_error_without_repair():
    with pytest.raises(DataError) as info:
        read_i2b2(FIXTURES / "i2b2_small.xml", repair_ampersands=False)
    assert "i2b2_small.xml:17:" in str(info.value)
    assert "XML syntax error" in str(info.value)


def test_text_mismatch_names_file_and_element():
    with pytest.raises(DataError) as info:
        read_i2b2(FIXTURES / "i2b2_text_mismatch.xml")
    message = str(info.value)
    assert "i2b2_text_mismatch.xml" in message
    assert "TIMEX3 id='T1'" in message
    assert "'2012-03-06' does not match '2012-03-05' at offsets 46-56" in message


def test_escape_leaves_entities_and_cdata_alone():
    markup = '<a t="R&D &amp; &#38; &lt;x"><![CDATA[salt & pepper]]></a>'
    fixed, count = escape_bare_ampersands(markup)
    assert count == 1
    assert fixed == '<a t="R&amp;D &amp; &#38; &lt;x"><![CDATA[salt & pepper]]></a>'


def _variant(tmp_path, name, old, new):
    path = tmp_path / name
    text = (FIXTURES / "i2b2_small.xml").read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "old, new, expected",
    [
        ('start="191" end="205"', 'start="191" end="999"', "TIMEX3 id='T3' offsets 191-999 outside the TEXT"),
        ('start="153" end="161"', 'start="153"', "TIMEX3 id='T2' has missing or non-integer start/end"),
        ("<TEXT><![CDATA[", "<NOTE><![CDATA[", "XML syntax error"),
        ("</TAGS>", "</TAGZ>", "XML syntax error"),
    ],
)
def test_malformed_variants(tmp_path, old, new, expected):
    path = _variant(tmp_path, "variant.xml", old, new)
    with pytest.raises(DataError) as info:
        read_i2b2(path)
    assert "variant.xml" in str(info.value)
    assert expected in str(info.value)


def test_missing_text_or_tags(tmp_path):
    path = tmp_path / "no_text.xml"
    path.write_text("<ClinicalNarrativeTemporalAnnotation><TAGS/></ClinicalNarrativeTemporalAnnotation>")
    with pytest.raises(DataError, match="no_text.xml: no <TEXT> element"):
        read_i2b2(path)
    path = tmp_path / "no_tags.xml"
    root = "ClinicalNarrativeTemporalAnnotation"
    path.write_text(f"<{root}><TEXT>x</TEXT></{root}>")
    with pytest.raises(DataError, match="no_tags.xml: no <TAGS> element"):
        read_i2b2(path)


def test_directory_reader_sorts_and_validates(tmp_path):
    for name in ("2.xml", "10.xml"):
        shutil.copy(FIXTURES / "i2b2_small.xml", tmp_path / name)
    documents = read_i2b2_dir(tmp_path)
    assert [d.doc_id for d in documents] == ["10", "2"]
    with pytest.raises(DataError, match="not a directory"):
        read_i2b2_dir(tmp_path / "absent")


def test_utf8_file_declared_latin1_is_an_error(tmp_path):
    markup = (FIXTURES / "i2b2_small.xml").read_text(encoding="utf-8").replace("chest pain", "chest päin")
    path = tmp_path / "declared.xml"
    path.write_bytes(markup.replace('encoding="UTF-8"', 'encoding="ISO-8859-1"', 1).encode("utf-8"))
    with pytest.raises(DataError, match=r"declared.xml:\d+: declares encoding 'ISO-8859-1' but its non-ASCII"):
        read_i2b2(path)


def test_file_is_decoded_as_declared(tmp_path):
    markup = (FIXTURES / "i2b2_small.xml").read_text(encoding="utf-8").replace("chest pain", "chest päin")
    path = tmp_path / "latin1.xml"
    path.write_bytes(markup.replace('encoding="UTF-8"', 'encoding="ISO-8859-1"', 1).encode("latin-1"))
    document = read_i2b2(path)
    assert "chest päin & shortness of\nbreath" in [s.text for s in document.spans]
    path.write_bytes(markup.encode("latin-1"))  # declared UTF-8 but Latin-1 bytes
    with pytest.raises(DataError, match=r"latin1.xml:\d+: not UTF-8 text \(byte 0xe4"):
        read_i2b2(path)
