"""Text an answer's JSON schema fixes, so a local backend can evaluate it in one batch.

Under an object schema whose keys are all required and written in order (every structured
answer of :mod:`src.prompts.answer_schema`), the grammar leaves the model no choice between
the values: ``{"reasoning_steps":`` opens the answer, ``, "spans":`` follows the first value and
``}`` the last, up to whitespace. Decoding such text token by token costs one model step per
token; evaluating it in one batch after the model's own first token costs about one step in
all (llama.cpp's prompt speed), and the model keeps its own tokenisation of where each piece
starts. :class:`SchemaCursor` follows the answer as it is written and says what to force next.

It also enforces token budgets on lists (``{"reasoning_steps": 32}``): once the model has
spent a list's budget inside it, the open string and the list are closed (``"]``) and the answer
goes on to its next key, so a reasoning loop ("1. 1. 2. 3. ...") cannot take the tokens the
spans need.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from src.backends.gguf_files import JsonValueEnd

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def object_keys(schema: str | None) -> list[str] | None:
    """The keys of an object schema in writing order when every one is required, else None."""
    if not schema:
        return None
    parsed = json.loads(schema)
    properties = parsed.get("properties") if parsed.get("type") == "object" else None
    if not properties or parsed.get("additionalProperties", True) is not False:
        return None
    keys = list(properties)
    if set(keys) != set(parsed.get("required", ())) or not all(_KEY.fullmatch(k) for k in keys):
        return None
    return keys


class SchemaCursor(JsonValueEnd):
    """Where the answer being written stands within its top-level object (the JSON scan of
    :class:`~src.backends.gguf_files.JsonValueEnd`, read through its hooks).

    Args:
        keys: the object's keys in writing order (:func:`object_keys`).
        budgets: tokens the model may spend inside a key's list before it is closed.
        prefill: force the text between the values (else only the budgets' closings).
    """

    def __init__(self, keys: list[str], budgets: Mapping[str, int] | None = None, prefill: bool = True) -> None:
        super().__init__()
        self.keys = keys
        self.budgets = dict(budgets or {})
        self.prefill = prefill
        self._closed_values = 0  # values of the top-level object that have closed
        self._since_anchor = ""  # text written since the answer began or a value closed
        self._after_comma = False  # inside a list, after a comma (an item must follow)
        self._value_tokens = 0  # tokens spent inside the current value

    @property
    def _depth(self) -> int:
        return len(self._stack)

    @property
    def complete_but_closing(self) -> bool:
        """Every value is written and only ``}`` (and whitespace) may follow: with ``prefill``,
        the caller ends the answer with ``}`` instead of decoding it."""
        return self.prefill and self._depth == 1 and not self._in_string and self._closed_values == len(self.keys)

    def feed(self, text: str, tokens: int = 1) -> bool:
        """Read text the answer now holds (``tokens`` tokens of it); True once the object closed."""
        if self._depth >= 2:
            self._value_tokens += tokens
        for char in text:
            if self._depth <= 1:  # between values: the brace, keys, colons and commas
                self._since_anchor += char
            if self._step(char, self._consumed):
                return True
            self._consumed += 1
        return False

    def forced(self) -> str:
        """The text the schema fixes from here (empty when the model must choose)."""
        if self._depth >= 2:
            return self._budget_close()
        if not self.prefill or self._closed_values >= len(self.keys):
            return ""  # the caller closes the object (complete_but_closing)
        index = self._closed_values
        segment = f'{{"{self.keys[0]}":' if index == 0 else f', "{self.keys[index]}":'
        written = self._since_anchor.lstrip() if index == 0 else self._since_anchor
        if not written or not segment.startswith(written) or written == segment:
            return ""  # wait for the model's first token of the segment, or it went its own way
        return segment[len(written) :]

    def _budget_close(self) -> str:
        key = self.keys[self._closed_values] if self._closed_values < len(self.keys) else None
        budget = self.budgets.get(key) if key is not None else None
        if budget is None or self._value_tokens < budget or self._depth != 2:
            return ""
        if self._in_string:
            return '"]'
        return "" if self._after_comma else "]"  # after a comma the next item opens first

    # the scan's hooks
    def _open(self, bracket: str) -> None:
        super()._open(bracket)
        if self._depth == 2:
            self._value_tokens = 0

    def _closing(self) -> None:
        if self._depth == 2:  # a value of the top-level object closes
            self._closed_values += 1
            self._since_anchor = ""

    def _comma(self) -> None:
        self._after_comma = self._depth >= 2

    def _string_opened(self) -> None:
        self._after_comma = False
