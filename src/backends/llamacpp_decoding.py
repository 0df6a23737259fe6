"""The llama.cpp backend's decoding loop: the prompt brought into the KV cache (the shared
prefix kept), then token by token until the answer's JSON is complete, an end-of-generation
token, or ``max_tokens``; text the schema fixes evaluated in one batch.

Generation ends as soon as the answer's first top-level JSON value is complete (grammar or
not), at an end-of-generation token, or at ``max_tokens`` (``finish_reason`` ``stop`` or
``length``); with ``stop_at_repeat``, also as soon as an item of the answer's final list
repeats an earlier one (:mod:`src.backends.repeats`).
"""

from __future__ import annotations

import codecs
import ctypes
from typing import Any

import numpy as np

from src.backends.forced import SchemaCursor, object_keys
from src.backends.gguf_files import JsonValueEnd, import_llama_cpp
from src.backends.llamacpp_grammar import GrammarSampling
from src.backends.repeats import RepeatedItem
from src.core.requests import ChatRequest


class DecodingLoop(GrammarSampling):
    """Mixin of :class:`~src.backends.llamacpp_backend.LlamaCppBackend`: one request's prompt
    evaluation and generation on one llama.cpp context. Needs ``prefix_reuse``,
    ``prefill_schema_text``, ``list_token_budgets``, the tokenizing context ``_llm`` and a
    ``_forced_tokens`` dict (text -> tokens) it fills."""

    prefix_reuse: bool
    prefill_schema_text: bool
    list_token_budgets: dict[str, int]
    _llm: Any
    _forced_tokens: dict[str, list[int]]

    def _evaluate_prompt(self, llm: Any, tokens: list[int]) -> int:
        """Bring ``llm``'s KV cache to ``tokens``; returns how many were reused rather than evaluated."""
        keep = 0
        if self.prefix_reuse and llm.n_tokens > 0:
            cached = llm.input_ids[: llm.n_tokens]
            limit = min(len(cached), len(tokens) - 1)  # evaluate >= 1 token: its logits are needed
            if limit > 0:
                same = np.asarray(tokens[:limit], dtype=cached.dtype) == cached[:limit]
                keep = limit if same.all() else int(np.argmin(same))
        if keep > 0 and llm._ctx.kv_cache_seq_rm(-1, keep, -1):
            llm.n_tokens = keep
        else:
            keep = 0
            llm.reset()
        llm.eval(tokens[keep:])
        return keep

    def _piece(self, token: int) -> bytes:
        """The token's text bytes (special tokens render as nothing)."""
        llama_cpp = import_llama_cpp()
        size = 64
        while True:
            buffer = ctypes.create_string_buffer(size)
            length = llama_cpp.llama_token_to_piece(self._vocab, token, buffer, size, 0, False)
            if length >= 0:
                return buffer.raw[:length]
            size = -length

    def _logits(self, llm: Any) -> np.ndarray:
        pointer = llm._ctx.get_logits_ith(-1)
        return np.ctypeslib.as_array(pointer, shape=(self._n_vocab,)).copy()

    def _decode(self, llm: Any, request: ChatRequest) -> tuple[str, int, str]:
        """Generate after the evaluated prompt; ``(text, generated tokens, finish_reason)``.
        Text the schema fixes is evaluated with the model's last token in one batch and counts
        as generated (:meth:`_cursor`)."""
        llama_cpp = import_llama_cpp()
        grammar = self._grammar_sampler(request.response_schema) if request.response_schema else None
        rng = np.random.default_rng(request.seed) if request.temperature > 0 else None
        scanner = RepeatedItem(request.stop_at_repeat) if request.stop_at_repeat else JsonValueEnd()
        cursor = self._cursor(request)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pieces: list[str] = []
        generated = 0
        finish_reason = "length"
        try:
            logits = self._logits(llm)
            while generated < request.max_tokens:
                token = self._choose(logits, grammar, request.temperature, rng)
                if llama_cpp.llama_vocab_is_eog(self._vocab, token):
                    finish_reason = "stop"
                    break
                generated += 1
                if grammar is not None:
                    llama_cpp.llama_sampler_accept(grammar, token)
                piece = decoder.decode(self._piece(token))
                pieces.append(piece)
                if scanner.feed(piece):
                    finish_reason = "stop"
                    break
                if generated >= request.max_tokens:
                    break
                batch = [token]
                if cursor is not None:
                    cursor.feed(piece)
                    if cursor.complete_but_closing:  # the grammar allows only the closing brace
                        pieces.append("}")
                        scanner.feed("}")
                        finish_reason = "stop"
                        break
                    text = cursor.forced()
                    forced = self._forced_tokens_for(text) if text else []
                    if forced and generated + len(forced) < request.max_tokens:
                        self._accept_forced(grammar, forced)
                        pieces.append(text)
                        cursor.feed(text, tokens=len(forced))
                        generated += len(forced)
                        if scanner.feed(text):
                            finish_reason = "stop"
                            break
                        batch += forced
                llm.eval(batch)
                logits = self._logits(llm)
        finally:
            if grammar is not None:
                llama_cpp.llama_sampler_free(grammar)
        pieces.append(decoder.decode(b"", final=True))
        return scanner.answer("".join(pieces)).strip(), generated, finish_reason

    def _cursor(self, request: ChatRequest) -> SchemaCursor | None:
        """The schema cursor of a constrained object answer (None: nothing to force)."""
        if not (self.prefill_schema_text or self.list_token_budgets) or request.response_schema is None:
            return None
        keys = object_keys(request.response_schema)
        return SchemaCursor(keys, self.list_token_budgets, prefill=self.prefill_schema_text) if keys else None

    def _forced_tokens_for(self, text: str) -> list[int]:
        if text not in self._forced_tokens:
            self._forced_tokens[text] = self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        return self._forced_tokens[text]
