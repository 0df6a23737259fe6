"""The meter's tokenizer for a model, where the backend has one that is cheap and local: the GGUF's
own vocabulary for a llama.cpp model, an already downloaded Hugging Face tokenizer for any model.
A backend fact, so it lives with the backends; billing only counts with the
:class:`~src.billing.prices.TokenCounter` it gets."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from src.backends.gguf_files import gguf_path
from src.billing.prices import TokenCounter
from src.core.requests import ChatRequest


@contextlib.contextmanager
def _quiet_native_stderr() -> Iterator[None]:
    """llama.cpp writes context notes to file descriptor 2 even when told not to."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def token_counter(model: Any) -> TokenCounter:
    """The tokenizer of ``model`` (a :class:`~src.config.schema.Model`) where it is cheap and local: the
    GGUF's vocabulary for a llama.cpp model (completion prompts, which are the text as sent; chat
    prompts add a template and are estimated), ``model.tokenizer`` (a Hugging Face id already
    downloaded) for any model; else the estimate."""
    options = model.options
    hf_name = model.tokenizer
    if hf_name:
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(hf_name), local_files_only=True)
        except Exception:  # noqa: BLE001 - not on this machine: the stated estimate
            return TokenCounter()

        def chat(request: ChatRequest) -> int:
            return len(tokenizer.apply_chat_template(request.message_dicts(), add_generation_prompt=True))

        def plain(request: ChatRequest) -> int:
            return len(tokenizer.encode(request.messages[0][1]))

        def text(value: str) -> int:
            return len(tokenizer.encode(value, add_special_tokens=False))

        return TokenCounter(plain, chat, str(hf_name), text)
    if model.backend == "llamacpp":
        try:
            import llama_cpp

            path = gguf_path(model.model_id, options.get("gguf_file"), options.get("gguf_package"))
            with _quiet_native_stderr():
                vocab = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
        except Exception:  # noqa: BLE001 - no llama.cpp or no file: the stated estimate
            return TokenCounter()
        add_bos = bool(vocab._model.add_bos_token())

        def completion(request: ChatRequest) -> int:
            return len(vocab.tokenize(request.messages[0][1].encode("utf-8"), add_bos=add_bos, special=False))

        def generated(value: str) -> int:
            return len(vocab.tokenize(value.encode("utf-8"), add_bos=False, special=False))

        return TokenCounter(completion, None, Path(path).name, generated)
    return TokenCounter()
