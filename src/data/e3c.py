"""Reader for the E3C corpus (English layer 1) in WebAnno's UIMA XMI export.

The text is the ``sofaString`` of the ``cas:Sofa`` element; annotations are
stand-off elements whose ``begin``/``end`` index that string: ``custom:TIMEX3``,
``custom:EVENT`` and DKPro's ``type4:Sentence``. The prefixes are only local
names, so elements are matched on their namespace URIs. UIMA counts offsets in
Java (UTF-16) code units, which differ from Python's code points when the text has
characters outside the Basic Multilingual Plane; offsets are converted for that.
Other layers (CLINENTITY, ACTOR, BODYPART, RML, links) are ignored.

E3C annotations carry no text of their own, so offsets are verified against the words
they cover: an annotation that starts or ends inside a word (a word character on both
sides of the boundary), or a span that starts or ends with whitespace, is an error
naming file, ``xmi:id`` and offsets. That is what a wrong decoding or shifted offsets
produce (no annotation of the English layer 1 breaks these rules); the file is decoded
as its XML declaration says (:func:`src.data.timeml.check_declared_encoding`).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from src.core.errors import DataError
from src.data.schema import Document, Span, check_spans, corpus_files
from src.data.timeml import parse_xml_file

CAS_NS = "http:///uima/cas.ecore"
CUSTOM_NS = "http:///webanno/custom.ecore"
SEGMENTATION_NS = "http:///de/tudarmstadt/ukp/dkpro/core/api/segmentation/type.ecore"
XMI_ID = "{http://www.omg.org/XMI}id"
SPAN_TAGS = {f"{{{CUSTOM_NS}}}TIMEX3": "TIMEX", f"{{{CUSTOM_NS}}}EVENT": "EVENT"}
SENTENCE_TAG = f"{{{SEGMENTATION_NS}}}Sentence"
SOFA_TAG = f"{{{CAS_NS}}}Sofa"
WORD_CHARACTER = re.compile(r"\w")


def _utf16_to_python(text: str) -> list[int] | None:
    """Map UTF-16 offsets to Python string offsets; None when they are the same."""
    if all(ord(ch) <= 0xFFFF for ch in text):
        return None
    mapping = []
    for index, ch in enumerate(text):
        mapping.append(index)
        if ord(ch) > 0xFFFF:
            mapping.append(index)  # a low surrogate never starts or ends an annotation
    mapping.append(len(text))
    return mapping


def _trim(text: str, begin: int, end: int) -> tuple[int, int]:
    """Shrink a range so that it neither starts nor ends with whitespace."""
    piece = text[begin:end]
    begin += len(piece) - len(piece.lstrip())
    return begin, begin + len(piece.strip())


def _offsets(path: Path, element: ET.Element, mapping: list[int] | None, what: str) -> tuple[int, int]:
    """The (begin, end) of an annotation, validated and converted to Python offsets."""
    try:
        begin, end = int(element.get("begin", "")), int(element.get("end", ""))
    except ValueError:
        raise DataError(path, f"{what} has missing or non-integer begin/end") from None
    if mapping is not None:
        if not (0 <= begin < len(mapping) and 0 <= end < len(mapping)):
            raise DataError(path, f"{what} offsets {begin}-{end} outside the sofa text")
        begin, end = mapping[begin], mapping[end]
    return begin, end


def _inside_word(text: str, position: int) -> bool:
    """Whether ``position`` falls between two word characters of ``text``."""
    return 0 < position < len(text) and all(WORD_CHARACTER.match(ch) for ch in text[position - 1 : position + 1])


def _check_alignment(path: Path, element: ET.Element, what: str, text: str, begin: int, end: int) -> None:
    """Offsets must fall on word boundaries, and a span must not start or end with whitespace."""
    offsets = f"offsets {element.get('begin')}-{element.get('end')}"
    for name, position in (("starts", begin), ("ends", end)):
        if _inside_word(text, position):
            context = text[max(0, position - 8) : position] + "|" + text[position : position + 8]
            raise DataError(
                path,
                f"{what} {offsets} {name} inside a word ({context!r}): the offsets do not match the text "
                "(shifted offsets or a wrong encoding?)",
            )
    if element.tag in SPAN_TAGS and text[begin:end] != text[begin:end].strip():
        raise DataError(path, f"{what} {offsets} covers {text[begin:end]!r}, which starts or ends with whitespace")


def read_e3c(path: str | Path, source: str = "e3c") -> Document:
    """Read one E3C XMI file into a Document with spans and the corpus's sentences.

    Raises:
        DataError: not well-formed XML, UTF-8 declared as another encoding, no (or several)
            sofa strings, an annotation in another view, or offsets outside the text, empty,
            inside a word or on whitespace.
    """
    path = Path(path)
    root = parse_xml_file(path)
    sofas = root.findall(SOFA_TAG)
    if len(sofas) != 1 or sofas[0].get("sofaString") is None:
        found = f"found {len(sofas)} cas:Sofa element(s)"
        raise DataError(path, f"expected one cas:Sofa with a sofaString, {found}")
    sofa = sofas[0]
    text = sofa.get("sofaString")
    sofa_id = sofa.get(XMI_ID)
    mapping = _utf16_to_python(text)

    spans: list[Span] = []
    sentences: list[tuple[int, int]] = []
    for element in root:
        label = SPAN_TAGS.get(element.tag)
        if label is None and element.tag != SENTENCE_TAG:
            continue
        kind = element.tag.rsplit("}", 1)[-1]
        what = f"{kind} xmi:id={element.get(XMI_ID)}"
        if element.get("sofa") != sofa_id:
            raise DataError(path, f"{what} refers to sofa {element.get('sofa')!r}, not {sofa_id!r}")
        begin, end = _offsets(path, element, mapping, what)
        if not 0 <= begin < end <= len(text):
            problem = f"outside the text (length {len(text)}) or empty"
            raise DataError(path, f"{what} offsets {begin}-{end} {problem}")
        _check_alignment(path, element, what, text, begin, end)
        if label is None:
            if text[begin:end].strip():
                sentences.append(_trim(text, begin, end))
        else:
            spans.append(Span(begin, end, text[begin:end], label))
    spans.sort()
    sentences.sort()
    try:
        check_spans(text, spans, str(path))
    except ValueError as exc:
        raise DataError(path, str(exc)) from None
    return Document(doc_id=path.stem, text=text, spans=spans, source=source, sentences=sentences or None)


def read_e3c_dir(directory: str | Path, source: str = "e3c") -> list[Document]:
    """Read every ``*.xml`` file of a folder, sorted by file name."""
    return [read_e3c(p, source) for p in corpus_files(directory, ".xml")]
