"""Ending an answer at the first item that repeats an earlier one of its final list.

Under greedy decoding a small model often loops on one span (``"the gain", "the gain", ...``)
until the list's ``maxItems`` or the token budget. The parser drops repeated spans anyway, so
such a loop costs time and says nothing, except for the rare new span a model names after
looping. A request whose ``ChatRequest.stop_at_repeat`` names the answer's final list (a
path: ``$`` for a top-level array, ``$.key`` for the array under a key of a top-level object)
ends where an item of that list repeats one before it: the answer is that list closed before
the repeat (and the object closed after it), with ``finish_reason`` ``stop``.

Local backends stop decoding there (:class:`RepeatedItem`, fed piece by piece: the same scan
that ends generation at the answer's complete JSON value); API backends
cut the text they receive (:func:`cut_at_repeat`). Both give the same answer, because the
text up to the repeat is the same. Only the final list may be named: a cut drops whatever the
answer would have held after it.
"""

from __future__ import annotations

import json

from src.backends.gguf_files import JsonValueEnd
from src.core.requests import path_key


class RepeatedItem(JsonValueEnd):
    """Incremental detector of the first repeated string item of one list, on the scan that
    finds the end of the answer's JSON value.

    ``feed(piece)`` returns True once the value is complete or the text fed so far closes a
    string item equal (as a JSON value) to an earlier item of the watched list (:attr:`fired`);
    :meth:`kept` is then the text cut after the last item kept, the list and object closed, and
    :meth:`answer` whichever cut applies. Text before the first ``[`` or ``{`` is skipped, and
    nothing after the top-level value is read.
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self._key = path_key(path)
        self._closing_text = "]" if self._key is None else "]}"
        self._watched_depth: int | None = None  # stack depth while inside the watched list
        self._string: list[str] = []  # the open string literal's characters, quotes included
        self._object_key: str | None = None  # the last key read in the top-level object
        self._expect_key = False
        self._seen: set[str] = set()
        self._last_item_end: int | None = None
        self.cut: int | None = None

    @property
    def fired(self) -> bool:
        """True once a repeated item was found."""
        return self.cut is not None

    def kept(self, text: str) -> str:
        """``text`` (everything fed) cut after the last kept item, with the list and object closed."""
        if self.cut is None:
            return text
        return text[: self.cut] + self._closing_text

    def answer(self, text: str) -> str:
        return self.kept(text) if self.fired else super().answer(text)

    def _open(self, bracket: str) -> None:
        super()._open(bracket)
        if bracket == "{" and len(self._stack) == 1:
            self._expect_key = True
        if bracket != "[" or self._watched_depth is not None:
            return
        top_array = self._key is None and self._stack == ["]"]
        keyed = self._key is not None and self._stack == ["}", "]"] and self._object_key == self._key
        if top_array or keyed:
            self._watched_depth = len(self._stack)
            self._seen.clear()

    def _closing(self) -> None:
        if self._watched_depth == len(self._stack):
            self._watched_depth = None

    def _comma(self) -> None:
        if self._stack == ["}"]:
            self._expect_key = True

    def _string_opened(self) -> None:
        self._string = ['"']

    def _string_char(self, char: str) -> None:
        self._string.append(char)

    def _string_closed(self, position: int) -> bool:
        value = _json_string("".join(self._string))
        if self._stack == ["}"] and self._expect_key:
            self._object_key, self._expect_key = value, False
            return False
        if self._watched_depth != len(self._stack):
            return False
        if value in self._seen:
            self.cut = self._last_item_end
            return True
        self._seen.add(value)
        self._last_item_end = position + 1
        return False


def _json_string(raw: str) -> str:
    """The value of a JSON string literal (its raw text when it is not valid JSON)."""
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    return value if isinstance(value, str) else raw


def cut_at_repeat(text: str, path: str | None) -> tuple[str, bool]:
    """``text`` ended at the first repeated item of the list at ``path`` (unchanged when there
    is none or ``path`` is None); the flag says whether it was cut."""
    if path is None:
        return text, False
    detector = RepeatedItem(path)
    detector.feed(text)
    if not detector.fired:
        return text, False
    return detector.kept(text), True
