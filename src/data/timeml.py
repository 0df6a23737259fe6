"""Reader for TimeML files: TimeBank 1.2 and the TempEval-3 "TBAQ-cleaned" folders.

TimeML annotates inline: ``<TIMEX3>`` and ``<EVENT>`` elements wrap the words they
mark, so the document text is the element tree's character data and a span's
offsets are where its element starts and ends in that text. Two layouts exist:

* pure TimeML (``timebank-1.2``): text directly under ``<TimeML>``; the document
  creation time is the one ``<TIMEX3>`` whose ``functionInDocument`` is ``CREATION_TIME``
  (``PUBLICATION_TIME`` in 15 WSJ files); none, two or markup nested inside it is an error. It sits on its own header line (after the
  body in one file, SJMN91-06338157), so that line is left out of the document:
  otherwise it would become a sentence holding an unannotated date. So is the wire
  trailer of 17 AP/NYT stories (a ``(PROFILE`` routing block and a transmission
  stamp such as ``AP-NY-02-13-98 1426EST``), which TBAQ-cleaned moves out of its
  TEXT too.
* TBAQ-cleaned: ``<DOCID>``, ``<DCT>``, ``<TITLE>``, ``<EXTRAINFO>``, ``<TEXT>``;
  the document is the content of ``<TEXT>`` only, the creation time the one ``<TIMEX3>``
  of the one ``<DCT>`` (a ``CREATION_TIME`` inside ``<TEXT>`` is an error).

The file is decoded as its XML declaration says, and UTF-8 bytes declared as another
encoding are an error (:func:`check_declared_encoding`), never shifted offsets.

Link elements (``MAKEINSTANCE``, ``TLINK``, ``SLINK``, ``ALINK``) carry no text
and are ignored. The text is stripped of surrounding whitespace, and so is each
span whose element holds some (``<EVENT> back </EVENT>``); offsets follow.
"""

from __future__ import annotations

import codecs
import logging
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from src.core.errors import DataError
from src.data.schema import Document, Span, check_spans, corpus_files

SPAN_LABELS = {"TIMEX3": "TIMEX", "EVENT": "EVENT"}
LINK_TAGS = frozenset({"MAKEINSTANCE", "TLINK", "SLINK", "ALINK"})
DCT_FUNCTIONS = frozenset({"CREATION_TIME", "PUBLICATION_TIME"})
WIRE_TRAILER = re.compile(
    r"(?:\n\s*\(PROFILE\b.*?)?\n\s*[A-Z]{2,4}(?:-[A-Z]{2})?-\d\d-\d\d-\d\d \d{4}E[SD]T\s*$", re.DOTALL
)

logger = logging.getLogger(__name__)


XML_DECLARED_ENCODING = re.compile(rb"""^<\?xml[^>]*?\sencoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")


def declared_encoding(data: bytes) -> str | None:
    """The encoding named in the XML declaration of ``data`` (None without one, or behind a BOM)."""
    match = XML_DECLARED_ENCODING.match(data)
    return match.group(1).decode("ascii") if match else None


def check_declared_encoding(path: str | Path, data: bytes) -> None:
    """Refuse UTF-8 bytes under a declaration of another 8-bit encoding (e.g. ISO-8859-1).

    Any byte sequence decodes as Latin-1, so such a file would parse, but every non-ASCII
    character would become two or three and every later offset would shift. Text in a real
    Latin-1 file is virtually never also valid multi-byte UTF-8, so this test is safe.
    """
    declared = declared_encoding(data)
    if declared is None:
        return
    try:
        name = codecs.lookup(declared).name
    except LookupError:
        raise DataError(path, f"the XML declaration names an unknown encoding {declared!r}") from None
    if name.startswith("utf") or data.isascii():
        return
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return
    first = next(i for i, byte in enumerate(data) if byte > 0x7F)
    line = data.count(b"\n", 0, first) + 1
    raise DataError(
        path,
        f"declares encoding {declared!r} but its non-ASCII bytes (first at byte {first}) are UTF-8: "
        "reading it as declared would shift every offset after them",
        line,
    )


def parse_xml_file(path: str | Path) -> ET.Element:
    """Parse an XML file, decoded as its declaration says; errors become a DataError naming file and line."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise DataError(path, f"cannot read file ({exc.strerror or exc})") from None
    check_declared_encoding(path, data)
    try:
        return ET.fromstring(data)
    except ET.ParseError as exc:
        line = exc.position[0] if getattr(exc, "position", None) else None
        raise DataError(path, f"XML syntax error: {exc}", line) from None


class _InlineText:
    """Flattens an element tree into text, remembering where each span element lies."""

    def __init__(self, skip: ET.Element | None = None):
        self.pieces: list[str] = []
        self.length = 0
        self.raw_spans: list[tuple[int, int, str, str]] = []  # start, end, label, element id
        self.skip = skip

    def _append(self, text: str | None) -> None:
        if text:
            self.pieces.append(text)
            self.length += len(text)

    def visit_content(self, element: ET.Element) -> None:
        """Add ``element``'s own text and its children (with their tails), not its tail."""
        self._append(element.text)
        for child in element:
            if child.tag not in LINK_TAGS and child is not self.skip:
                start = self.length
                self.visit_content(child)
                label = SPAN_LABELS.get(child.tag)
                if label is not None:
                    element_id = child.get("tid") or child.get("eid") or "?"
                    self.raw_spans.append((start, self.length, label, f"{child.tag} {element_id}"))
            tail = child.tail
            if child is self.skip and tail and "\n" in tail:
                tail = tail[tail.index("\n") :]  # the rest of the DCT's header line goes with it
            self._append(tail)

    def text(self) -> str:
        return "".join(self.pieces)


def _without_wire_trailer(path: Path, text: str, spans: list[tuple[int, int, str, str]]) -> str:
    """Cut a trailing wire-service block off the text unless an annotation lies in it."""
    match = WIRE_TRAILER.search(text)
    if match is None:
        return text
    if any(end > match.start() for _, end, _, _ in spans):
        logger.warning("%s: annotated text inside the wire trailer; kept it", path)
        return text
    return text[: match.start()]


def _build_document(
    path: Path,
    content: ET.Element,
    source: str,
    dct: str | None,
    skip: ET.Element | None = None,
    drop_wire_trailer: bool = False,
) -> Document:
    """Turn the content element into a Document with trimmed text and spans."""
    flat = _InlineText(skip)
    flat.visit_content(content)
    raw_text = flat.text()
    if drop_wire_trailer:
        raw_text = _without_wire_trailer(path, raw_text, flat.raw_spans)
    lead = len(raw_text) - len(raw_text.lstrip())
    text = raw_text.strip()
    spans = []
    for start, end, label, element in flat.raw_spans:
        piece = raw_text[start:end]
        stripped = piece.strip()
        if not stripped:
            raise DataError(path, f"{element} has no text")
        start += piece.index(stripped) - lead
        end = start + len(stripped)
        spans.append(Span(start, end, stripped, label))
    spans.sort()
    try:
        check_spans(text, spans, str(path))
    except ValueError as exc:  # cannot happen for inline markup; kept as a guard
        raise DataError(path, str(exc)) from None
    return Document(doc_id=path.stem, text=text, spans=spans, source=source, dct=dct)


def _default_source(path: Path, has_text_element: bool) -> str:
    if not has_text_element:
        return "timebank"
    return "aquaint" if path.parent.name.lower() == "aquaint" else "tbaq-timebank"


def _element_name(element: ET.Element) -> str:
    return f"{element.tag} {element.get('tid') or element.get('eid') or element.get('sid') or '?'}"


def _check_creation_time(path: Path, candidates: list[ET.Element], where: str) -> ET.Element:
    """The one DCT TIMEX3 among ``candidates``: none, several or markup nested in it is an error."""
    if len(candidates) != 1:
        found = f"found {len(candidates)}" + "".join(f", {_element_name(el)}" for el in candidates)
        raise DataError(path, f"expected exactly one creation time TIMEX3 {where}, {found}")
    [dct] = candidates
    nested = next(iter(dct), None)
    if nested is not None:
        raise DataError(path, f"{_element_name(nested)} is nested inside the creation time {_element_name(dct)}")
    return dct


def _tbaq_dct(path: Path, root: ET.Element, text_element: ET.Element) -> ET.Element:
    """The DCT of a TBAQ file: the one TIMEX3 in its one <DCT>; a CREATION_TIME in <TEXT> is a second one.

    A PUBLICATION_TIME TIMEX3 inside <TEXT> (6 AQUAINT files) is an ordinary span of the text.
    """
    dct_elements = root.findall("DCT")
    if len(dct_elements) != 1:
        raise DataError(path, f"expected one <DCT> element, found {len(dct_elements)}")
    in_text = [el for el in text_element.iter("TIMEX3") if el.get("functionInDocument") == "CREATION_TIME"]
    if in_text:
        raise DataError(path, f"{_element_name(in_text[0])} in <TEXT> is a second creation time (the DCT is in <DCT>)")
    return _check_creation_time(path, dct_elements[0].findall("TIMEX3"), "in <DCT>")


def read_timeml(path: str | Path, source: str | None = None) -> Document:
    """Read one TimeML file (pure TimeBank 1.2 or TBAQ-cleaned layout).

    Args:
        path: the ``.tml`` file.
        source: the Document's source; by default "timebank" for pure TimeML,
            "aquaint" for a TBAQ file in an ``AQUAINT`` folder, else "tbaq-timebank".

    Raises:
        DataError: the file is not well-formed XML, is not a TimeML document, an
            annotation element is empty, or the document has no creation time, more
            than one, or markup nested inside it.
    """
    path = Path(path)
    root = parse_xml_file(path)
    if root.tag != "TimeML":
        raise DataError(path, f"root element is <{root.tag}>, expected <TimeML>")
    text_element = root.find("TEXT")
    has_text_layout = any(root.find(tag) is not None for tag in ("TEXT", "DCT", "DOCID"))
    source = source or _default_source(path, has_text_layout)
    if has_text_layout:
        if text_element is None:
            raise DataError(path, "TBAQ-style TimeML file without a <TEXT> element")
        dct = _tbaq_dct(path, root, text_element).get("value")
        return _build_document(path, text_element, source, dct, skip=None)
    candidates = [el for el in root.iter("TIMEX3") if el.get("functionInDocument") in DCT_FUNCTIONS]
    skip = candidates[0] if candidates else None
    document = _build_document(path, root, source, None, skip=skip, drop_wire_trailer=True)
    # checked after the spans, so that a broken span is reported first
    dct = _check_creation_time(path, candidates, "(functionInDocument CREATION_TIME or PUBLICATION_TIME)")
    document.dct = dct.get("value")
    return document


def read_timeml_dir(directory: str | Path, source: str | None = None) -> list[Document]:
    """Read every ``*.tml`` file of a folder, sorted by file name."""
    return [read_timeml(p, source) for p in corpus_files(directory, ".tml")]
