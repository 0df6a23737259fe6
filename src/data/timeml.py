"""Reader for TimeML files: TimeBank 1.2 and the TempEval-3 "TBAQ-cleaned" folders.

TimeML annotates inline: ``<TIMEX3>`` and ``<EVENT>`` elements wrap the words they
mark, so the document text is the element tree's character data and a span's
offsets are where its element starts and ends in that text. Two layouts exist:

* pure TimeML (``timebank-1.2``): text directly under ``<TimeML>``; the document
  creation time is a ``<TIMEX3>`` whose ``functionInDocument`` is ``CREATION_TIME``
  (``PUBLICATION_TIME`` in 15 WSJ files). It sits on its own header line (after the
  body in one file, SJMN91-06338157), so that line is left out of the document:
  otherwise it would become a sentence holding an unannotated date. So is the wire
  trailer of 17 AP/NYT stories (a ``(PROFILE`` routing block and a transmission
  stamp such as ``AP-NY-02-13-98 1426EST``), which TBAQ-cleaned moves out of its
  TEXT too.
* TBAQ-cleaned: ``<DOCID>``, ``<DCT>``, ``<TITLE>``, ``<EXTRAINFO>``, ``<TEXT>``;
  the document is the content of ``<TEXT>`` only.

Link elements (``MAKEINSTANCE``, ``TLINK``, ``SLINK``, ``ALINK``) carry no text
and are ignored. The text is stripped of surrounding whitespace, and so is each
span whose element holds some (``<EVENT> back </EVENT>``); offsets follow.
"""

from __future__ import annotations

import logging
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from src.data.schema import DataError, Document, Span, check_spans, corpus_files

SPAN_LABELS = {"TIMEX3": "TIMEX", "EVENT": "EVENT"}
LINK_TAGS = frozenset({"MAKEINSTANCE", "TLINK", "SLINK", "ALINK"})
DCT_FUNCTIONS = frozenset({"CREATION_TIME", "PUBLICATION_TIME"})
WIRE_TRAILER = re.compile(
    r"(?:\n\s*\(PROFILE\b.*?)?\n\s*[A-Z]{2,4}(?:-[A-Z]{2})?-\d\d-\d\d-\d\d \d{4}E[SD]T\s*$", re.DOTALL
)

logger = logging.getLogger(__name__)


def parse_xml_file(path: str | Path) -> ET.Element:
    """Parse an XML file; a syntax error becomes a DataError naming the file and line."""
    try:
        return ET.parse(path).getroot()
    except ET.ParseError as exc:
        line = exc.position[0] if getattr(exc, "position", None) else None
        raise DataError(path, f"XML syntax error: {exc}", line) from None
    except OSError as exc:
        raise DataError(path, f"cannot read file ({exc.strerror or exc})") from None


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


def read_timeml(path: str | Path, source: str | None = None) -> Document:
    """Read one TimeML file (pure TimeBank 1.2 or TBAQ-cleaned layout).

    Args:
        path: the ``.tml`` file.
        source: the Document's source; by default "timebank" for pure TimeML,
            "aquaint" for a TBAQ file in an ``AQUAINT`` folder, else "tbaq-timebank".

    Raises:
        DataError: the file is not well-formed XML, is not a TimeML document, or an
            annotation element is empty.
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
        dct_element = root.find("DCT/TIMEX3")
        dct = dct_element.get("value") if dct_element is not None else None
        return _build_document(path, text_element, source, dct, skip=None)
    dct_element = next(
        (el for el in root.iter("TIMEX3") if el.get("functionInDocument") in DCT_FUNCTIONS), None
    )
    dct = dct_element.get("value") if dct_element is not None else None
    return _build_document(path, root, source, dct, skip=dct_element, drop_wire_trailer=True)


def read_timeml_dir(directory: str | Path, source: str | None = None) -> list[Document]:
    """Read every ``*.tml`` file of a folder, sorted by file name."""
    return [read_timeml(p, source) for p in corpus_files(directory, ".tml")]
