"""The request every backend answers: frozen and hashable, so callers deduplicate requests and the
response cache and the meter key on them. A value type of the leaf package, because billing,
planning and every backend speak of it and none of them owns it."""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The top-level array of an answer, as a ``stop_at_repeat`` path (:mod:`src.backends.repeats`).
ROOT = "$"
_KEY_PATH = re.compile(r"^\$\.(?P<key>[A-Za-z_][A-Za-z0-9_]*)$")


def path_key(path: str) -> str | None:
    """The object key a path names (None for the top-level array); ValueError if malformed."""
    if path == ROOT:
        return None
    match = _KEY_PATH.match(path)
    if match is None:
        raise ValueError(f"stop_at_repeat: {path!r} is not a list path ('$' or '$.<key>')")
    return match["key"]


ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class ChatRequest:
    """One chat completion to generate.

    Attributes:
        messages: ``((role, content), ...)``; a tuple so the request is hashable.
        max_tokens: upper bound on generated tokens.
        temperature: 0 means greedy / deterministic (the only cacheable setting).
        seed: sent to providers that accept one; seeds sampling in local backends.
        request_id: the caller's label (e.g. the instance id); not part of the cache key.
        response_schema: canonical JSON text of a JSON schema the answer must follow (a
            string so the request stays hashable); backends that can constrain decoding
            (llama.cpp grammar, ``response_format: json_schema``) do, others ignore it.
            Part of the cache key.
        completion: True when ``messages`` is one user message to be continued as plain
            text (no chat template): the completion-style prompt form for small models.
            Part of the cache key.
        stop_at_repeat: the path of the answer's final list (``$`` or ``$.key``): the answer
            ends at the first item that repeats an earlier one of that list, closed before it
            (:mod:`src.backends.repeats`; every backend honours it). Part of the cache key.
    """

    messages: tuple[tuple[str, str], ...]
    max_tokens: int = 512
    temperature: float = 0.0
    seed: int = 0
    request_id: str = ""
    response_schema: str | None = None
    completion: bool = False
    stop_at_repeat: str | None = None

    def __post_init__(self) -> None:
        if not self.messages:
            raise ValueError(f"ChatRequest {self.request_id!r}: messages must not be empty")
        for position, message in enumerate(self.messages):
            if len(message) != 2 or not all(isinstance(part, str) for part in message):
                raise ValueError(
                    f"ChatRequest {self.request_id!r}: message {position} must be a (role, content) "
                    f"pair of strings, got {message!r}"
                )
            if message[0] not in ROLES:
                raise ValueError(
                    f"ChatRequest {self.request_id!r}: message {position} has role {message[0]!r}, "
                    f"expected one of {ROLES}"
                )
        if self.max_tokens < 1:
            raise ValueError(f"ChatRequest {self.request_id!r}: max_tokens must be >= 1")
        if self.temperature < 0:
            raise ValueError(f"ChatRequest {self.request_id!r}: temperature must be >= 0")
        if self.completion and (len(self.messages) != 1 or self.messages[0][0] != "user"):
            raise ValueError(f"ChatRequest {self.request_id!r}: a completion request is one user message")
        if self.stop_at_repeat is not None:
            try:
                path_key(self.stop_at_repeat)
            except ValueError as error:
                raise ValueError(f"ChatRequest {self.request_id!r}: {error}") from None

    @property
    def deterministic(self) -> bool:
        """True for greedy decoding, whose answer can be reused from the cache."""
        return self.temperature == 0

    def message_dicts(self) -> list[dict[str, str]]:
        """The messages in the ``[{"role", "content"}]`` form chat APIs and templates expect."""
        return [{"role": role, "content": content} for role, content in self.messages]
