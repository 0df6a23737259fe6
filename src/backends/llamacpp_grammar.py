"""Grammar-constrained token choice for the llama.cpp backend: a JSON schema's GBNF grammar as
a llama.cpp sampler, and the greedy (or sampled) next token restricted to what it allows.

A request with ``response_schema`` decodes under the GBNF grammar llama.cpp builds from the
schema (``json_schema_to_gbnf``). Greedy steps check the model's own best token against the
grammar first, then its :data:`TOP_CANDIDATES` best, and mask the whole vocabulary only when
all of them are rejected: the same token as masking first (the best allowed one) for a
fraction of the cost.
"""

from __future__ import annotations

import ctypes
import re
from typing import Any

import numpy as np

from src.backends.gguf_files import import_llama_cpp

#: llama-cpp-python's string character rule admits raw control characters (a newline inside a
#: string), which no JSON parser accepts; upstream llama.cpp's rule excludes them.
_LOOSE_CHAR_RULE = re.compile(r'^char ::= \[\^"\\\\\]', flags=re.M)
_JSON_CHAR_CLASS = r'[^"\\\x7F\x00-\x1F]'

#: Candidates checked against the grammar when the best token is rejected, before the whole
#: vocabulary is masked (ties at the last one's logit included).
TOP_CANDIDATES = 64
#: llama.cpp's ``llama_token_data`` as a numpy record.
_TOKEN_DATA = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)


def grammar_for_schema(schema: str) -> str:
    """GBNF for a JSON schema (llama.cpp's converter), allowing one space before the value.

    The optional leading space lets a completion prompt that ends in ``...:`` continue with the
    tokenizer's usual `` [`` token instead of forcing an unusual split. String characters
    exclude control characters, as JSON requires (:data:`_LOOSE_CHAR_RULE`).
    """
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    gbnf = json_schema_to_gbnf(schema)
    if not re.search(r"^root ::=", gbnf, flags=re.M):
        raise ValueError("llamacpp backend: the schema's grammar has no root rule")
    gbnf = re.sub(r"^root ::=", "json-answer ::=", gbnf, count=1, flags=re.M)
    gbnf = _LOOSE_CHAR_RULE.sub(lambda _: "char ::= " + _JSON_CHAR_CLASS, gbnf)
    return 'root ::= " "? json-answer\n' + gbnf


class GrammarSampling:
    """Mixin of :class:`~src.backends.llamacpp_backend.LlamaCppBackend`: grammar samplers and
    the constrained token choice. Needs the loaded model's ``_vocab`` and ``_n_vocab``, and a
    ``_grammars`` dict (schema -> GBNF) it fills."""

    _vocab: Any
    _n_vocab: int
    _grammars: dict[str, str]

    def _accept_forced(self, grammar: Any, tokens: list[int]) -> None:
        """Advance the grammar over forced tokens; one it rejects is a bug in
        :class:`~src.backends.forced.SchemaCursor`, never silently decoded past."""
        llama_cpp = import_llama_cpp()
        for token in tokens:
            if grammar is None or not self._grammar_allows(grammar, token, 0.0):
                raise RuntimeError(f"the schema's grammar rejects the forced token {token}")
            llama_cpp.llama_sampler_accept(grammar, token)

    def _grammar_sampler(self, schema: str) -> Any:
        llama_cpp = import_llama_cpp()
        gbnf = self._grammars.get(schema)
        if gbnf is None:
            gbnf = self._grammars[schema] = grammar_for_schema(schema)
        sampler = llama_cpp.llama_sampler_init_grammar(self._vocab, gbnf.encode("utf-8"), b"root")
        if not sampler:
            raise ValueError("llama.cpp could not parse the grammar built from response_schema")
        return sampler

    def _choose(self, logits: np.ndarray, grammar: Any, temperature: float, rng) -> int:
        """Greedy (or sampled) next token, restricted to what the grammar allows."""
        if grammar is not None:
            if temperature == 0:
                best = int(np.argmax(logits))
                if self._grammar_allows(grammar, best, float(logits[best])):
                    return best
                best = self._best_allowed_among_top(grammar, logits)
                if best is not None:
                    return best
            logits = self._grammar_mask(grammar, logits)
        if temperature == 0:
            return int(np.argmax(logits))
        scaled = (logits - logits.max()) / temperature
        probabilities = np.exp(scaled, where=np.isfinite(scaled), out=np.zeros_like(scaled))
        return int(rng.choice(len(probabilities), p=probabilities / probabilities.sum()))

    def _grammar_allows(self, grammar: Any, token: int, logit: float) -> bool:
        llama_cpp = import_llama_cpp()
        one = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, logit, 0.0))
        array = llama_cpp.llama_token_data_array(data=one, size=1, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(grammar, ctypes.byref(array))
        return bool(np.isfinite(one[0].logit))

    def _best_allowed_among_top(self, grammar: Any, logits: np.ndarray) -> int | None:
        """The greedy token under the grammar when one of the :data:`TOP_CANDIDATES` best is allowed
        (the highest allowed logit, the lowest id among ties: what masking the whole vocabulary
        picks), else None. Checking a few candidates costs a fraction of masking the vocabulary."""
        top = min(TOP_CANDIDATES, logits.size)
        threshold = np.partition(logits, -top)[-top]
        ids, kept = self._grammar_filter(grammar, np.flatnonzero(logits >= threshold), logits)
        allowed = np.isfinite(kept)
        if not allowed.any():
            return None
        best = kept[allowed].max()
        return int(ids[allowed & (kept == best)].min())

    def _grammar_mask(self, grammar: Any, logits: np.ndarray) -> np.ndarray:
        """``logits`` with every token the grammar rejects at -inf."""
        ids, kept = self._grammar_filter(grammar, np.arange(self._n_vocab), logits)
        masked = np.full(self._n_vocab, -np.inf, dtype=np.single)
        masked[ids] = kept
        if not np.isfinite(masked).any():
            raise RuntimeError("the grammar allows no next token")
        return masked

    def _grammar_filter(self, grammar: Any, ids: np.ndarray, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The candidates ``ids`` with their logits after the grammar (-inf where it rejects one)."""
        llama_cpp = import_llama_cpp()
        data = np.zeros(len(ids), dtype=_TOKEN_DATA)
        data["id"] = ids
        data["logit"] = logits[ids]
        array = llama_cpp.llama_token_data_array(
            data=data.ctypes.data_as(llama_cpp.llama_token_data_p), size=len(ids), selected=-1, sorted=False
        )
        llama_cpp.llama_sampler_apply(grammar, ctypes.byref(array))
        data = data[: array.size]
        return data["id"], data["logit"]
