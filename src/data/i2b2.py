"""Reader for the 2012 i2b2 temporal relations corpus (held under a data use agreement).

Each file is ``<ClinicalNarrativeTemporalAnnotation>`` with the note in
``<TEXT><![CDATA[...]]></TEXT>`` and stand-off annotations in ``<TAGS>``:
``<EVENT id start end text .../>`` and ``<TIMEX3 id start end text .../>`` whose
``start``/``end`` are 0-based, end-exclusive offsets into the TEXT content (which
begins with a newline). ``TLINK`` and ``SECTIME`` elements are ignored (SECTIME
repeats the admission and discharge dates already annotated as TIMEX3).

The file is decoded as its XML declaration says (UTF-8 without one); UTF-8 bytes under a
declaration of another encoding are an error. Known quirks of the release, handled explicitly:

* some files carry bare ``&`` in attribute values, which is not well-formed XML;
  with ``repair_ampersands`` they are escaped before parsing (outside CDATA
  sections only, so the note text and its offsets are untouched);
* XML attribute normalisation turns line breaks in ``text="..."`` into spaces, so
  the attribute is compared with the text slice up to whitespace; any other
  difference is an error naming the element, never a silent shift;
* zero-length annotations (``start == end``, empty text) are skipped and counted,
  and an annotation repeated with the same offsets and label is kept once.
"""

from __future__ import annotations

import logging
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from src.core.errors import DataError
from src.data.schema import Document, Span, check_spans, corpus_files
from src.data.timeml import check_declared_encoding, declared_encoding

logger = logging.getLogger(__name__)

ROOT_TAG = "ClinicalNarrativeTemporalAnnotation"
SPAN_LABELS = {"EVENT": "EVENT", "TIMEX3": "TIMEX"}
BARE_AMPERSAND = re.compile(r"&(?!(?:[A-Za-z_][\w.-]*|#[0-9]+|#x[0-9A-Fa-f]+);)")
CDATA_SECTION = re.compile(r"<!\[CDATA\[.*?\]\]>", re.DOTALL)


def escape_bare_ampersands(markup: str) -> tuple[str, int]:
    """Escape ``&`` that starts no entity reference, outside CDATA; returns (markup, count)."""
    pieces: list[str] = []
    count = 0
    position = 0
    for match in CDATA_SECTION.finditer(markup):
        fixed, n = BARE_AMPERSAND.subn("&amp;", markup[position : match.start()])
        pieces += [fixed, match.group(0)]
        count += n
        position = match.end()
    fixed, n = BARE_AMPERSAND.subn("&amp;", markup[position:])
    pieces.append(fixed)
    return "".join(pieces), count + n


def _read_markup(path: Path) -> str:
    """The file decoded as its XML declaration says (UTF-8 without one); UTF-8 declared otherwise is an error."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(path, f"cannot read file ({exc.strerror or exc})") from None
    check_declared_encoding(path, data)
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        encoding = "utf-16"  # its byte-order mark says so
    else:
        encoding = declared_encoding(data) or "utf-8"
    try:
        return data.decode("utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DataError(path, f"not {encoding} text (byte 0x{data[exc.start]:02x} at byte {exc.start})", line) from None


def _parse(path: Path, repair_ampersands: bool) -> ET.Element:
    markup = _read_markup(path)
    if repair_ampersands:
        markup, repaired = escape_bare_ampersands(markup)
        if repaired:
            logger.info("%s: escaped %d bare '&' in attribute values", path, repaired)
    try:
        return ET.fromstring(markup)
    except ET.ParseError as exc:
        line = exc.position[0] if getattr(exc, "position", None) else None
        raise DataError(path, f"XML syntax error: {exc}", line) from None


def _same_up_to_whitespace(a: str, b: str) -> bool:
    return a.split() == b.split()


def read_i2b2(path: str | Path, source: str = "i2b2", repair_ampersands: bool = True) -> Document:
    """Read one i2b2 2012 XML file into a Document with TIMEX and EVENT spans.

    Args:
        path: the ``.xml`` file.
        source: the Document's source.
        repair_ampersands: escape bare ``&`` in attributes (a known quirk of the release).

    Raises:
        DataError: not well-formed XML, no TEXT or TAGS, an annotation whose offsets
            are missing, outside the text, or whose text attribute disagrees with the
            text at those offsets (the message names the element id).
    """
    path = Path(path)
    root = _parse(path, repair_ampersands)
    if root.tag != ROOT_TAG:
        raise DataError(path, f"root element is <{root.tag}>, expected <{ROOT_TAG}>")
    text_element = root.find("TEXT")
    if text_element is None:
        raise DataError(path, "no <TEXT> element")
    tags = root.find("TAGS")
    if tags is None:
        raise DataError(path, "no <TAGS> element")
    text = "".join(text_element.itertext())

    spans: set[Span] = set()
    empty = 0
    for element in tags:
        label = SPAN_LABELS.get(element.tag)
        if label is None:
            continue
        what = f"{element.tag} id={element.get('id')!r}"
        try:
            start, end = int(element.get("start", "")), int(element.get("end", ""))
        except ValueError:
            raise DataError(path, f"{what} has missing or non-integer start/end") from None
        expected = element.get("text")
        if expected is None:
            raise DataError(path, f"{what} has no text attribute")
        if start == end and not expected.strip():
            empty += 1
            continue
        if not 0 <= start < end <= len(text):
            raise DataError(path, f"{what} offsets {start}-{end} outside the TEXT (length {len(text)})")
        found = text[start:end]
        if not _same_up_to_whitespace(found, expected):
            crlf = b"\r" in path.read_bytes()
            hint = " (the file has CR line endings, which XML parsing turns into LF)" if crlf else ""
            mismatch = f"text attribute {expected!r} does not match {found!r} at offsets {start}-{end}"
            raise DataError(path, f"{what}: {mismatch}{hint}")
        spans.add(Span(start, end, found, label))
    if empty:
        logger.info("%s: skipped %d zero-length annotation(s)", path, empty)
    ordered = sorted(spans)
    try:
        check_spans(text, ordered, str(path))
    except ValueError as exc:
        raise DataError(path, str(exc)) from None
    return Document(doc_id=path.stem, text=text, spans=ordered, source=source)


def read_i2b2_dir(directory: str | Path, source: str = "i2b2", repair_ampersands: bool = True) -> list[Document]:
    """Read every ``*.xml`` file of a folder (the user's i2b2 path), sorted by file name."""
    paths = corpus_files(directory, ".xml", hint="set the i2b2 path to the folder of .xml files")
    return [read_i2b2(p, source, repair_ampersands) for p in paths]
