"""On-disk response cache shared by all runs, and a Backend wrapper that only sends misses.

Layout: one JSON file per answer, ``<dir>/<key[:2]>/<key>.json``, where ``key`` is the sha256 of
a canonical JSON of everything that determines the answer. Why files and not SQLite: a write is
a temp file in the same directory followed by ``os.replace``, which is atomic on POSIX and on
Windows, so concurrent writers (a Hydra multirun, several machines on a shared disk) need no
lock, readers never see a partial answer, and two processes writing the same key write the same
deterministic answer so either one winning is correct. There is no fsync per entry (it would
cost milliseconds per answer): after a power loss an entry may be empty, which ``get`` treats
as a miss and the next run rewrites. SQLite would need WAL, busy retries and
a local disk (its locking is unreliable on network filesystems). The sharded folders keep
directories small at study scale (~10^5 answers).

Only deterministic requests (temperature 0) are cached, and only real answers (string text):
failed results never are, nor an answer the backend ended with ``finish_reason`` ``error`` or
``content_filter``, nor a blank answer unless it said ``stop`` or ``length`` (then it is the
model's own empty answer). Entries carry the answer's ``finish_reason`` and what the provider said it served
(``served``: ``model``, ``system_fingerprint``, ``provider``); older entries restore them as None
and ``{}``.

Every entry written now carries ``checksum``, the sha256 of the canonical JSON of the rest of
the entry: an entry edited by hand (or by a bad sync) no longer matches and is a miss. Entries
written before checksums existed have none and are used as they are (they are what the
committed pipeline's cache holds; ``python -m src.cache list --unsigned`` shows them). Any entry
that cannot be used (unreadable, not JSON, a field of the wrong type, another request's fields,
a checksum that does not match) is a miss with one warning naming its file, never a crash;
``python -m src.cache purge --invalid`` removes them all. The key never changes: the checksum
and ``served`` are fields of the entry, not of the key (the format: :mod:`src.backends.cache_entries`).

In a pipeline stage the cache also keeps the stage's answers folder, a DVC output
(:mod:`src.backends.stage_answers`): it is copied in before the stage runs and rewritten with
every answer the stage uses, so ``dvc push``/``dvc pull`` carry the answers to another machine.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path

from src.backends.base import Backend, GenerationResult, OrderedResults, ResultCallback
from src.backends.cache_entries import (  # noqa: F401 - the entry format, imported from here by the project
    CACHE_FORMAT,
    NOT_ANSWER_FINISH_REASONS,
    cache_key,
    cache_key_fields,
    canonical_json,
    entry_checksum,
    entry_problem,
    read_entry,
)
from src.backends.served import OFF_PIN, mismatch_counts
from src.backends.stage_answers import StageAnswers, from_environment, portable
from src.core.requests import ChatRequest
from src.durable import replace_durably

logger = logging.getLogger(__name__)


class ResponseCache:
    """A directory of answers keyed by request hash, safe for concurrent writers.

    Args:
        directory: created on first use; may be shared by every run and process.
        answers: the pipeline stage's answers folder (default: the one its command names in
            ``$TEMPGEN_ANSWERS``, none for a hand run): copied in now, then refilled with every
            answer used (:meth:`used`).
    """

    def __init__(self, directory: str | Path, answers: StageAnswers | None = None) -> None:
        self.directory = Path(directory)
        self._warned: set[Path] = set()  # one warning per bad file and process
        self.answers = answers or from_environment()
        if self.answers is not None:
            self._seed(self.answers)

    def _seed(self, answers: StageAnswers) -> None:
        """The stage's answers (each checked against its checksum) into this cache, a different local
        answer replaced (the study's answer is the one its lock was written with); the folder emptied."""
        found = answers.read()
        replaced = 0
        for key, answer in found.items():
            local = self.get(key, answer["fields"])
            if local is not None and portable(local) == answer:
                continue
            replaced += local is not None
            self.put(
                key,
                answer["fields"],
                answer["text"],
                answer["usage"],
                None,
                answer["finish_reason"],
                answer["served"],
                answer.get("refusal"),
            )
        if replaced:
            logger.warning(
                "%d answer(s) of the response cache differ from the stage's in %s: the stage's are used",
                replaced,
                answers.folder,
            )
        logger.info("%d answer(s) of the stage read from %s", len(found), answers.folder)
        answers.clear()

    def used(self, entry: dict) -> None:
        """A run used the answer ``entry`` (a hit or a new one): into the stage's answers folder."""
        if self.answers is not None:
            self.answers.record(entry)

    def _ignore(self, path: Path, why: str) -> None:
        if path not in self._warned:
            self._warned.add(path)
            logger.warning("ignoring cache entry %s: %s (python -m src.cache purge --invalid removes it)", path, why)

    def path(self, key: str) -> Path:
        """Where the answer for ``key`` lives."""
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str, fields: dict | None = None) -> dict | None:
        """The stored entry for ``key``, or None (missing, unreadable, not an answer, other fields)."""
        path = self.path(key)
        try:
            entry, problem = read_entry(path)
        except FileNotFoundError:
            return None
        if problem:
            self._ignore(path, problem)
            return None
        if fields is not None and entry.get("fields") != json.loads(canonical_json(fields)):
            self._ignore(path, "stored request differs")
            return None
        return entry

    def put(
        self,
        key: str,
        fields: dict,
        text: str,
        usage: dict,
        latency_s: float | None,
        finish_reason: str | None = None,
        served: dict | None = None,
        refusal: str | None = None,
    ) -> dict:
        """Store an answer atomically (temp file + ``os.replace``) and return the entry; refuses
        anything but an answer. ``refusal``: the model's refusal, kept only when set (older entries
        stay as they are); ``latency_s`` None: not measured here (an answer from a stage's folder)."""
        if not isinstance(text, str):
            raise TypeError(f"cache entry {key}: text must be a string, got {type(text).__name__}")
        if finish_reason in NOT_ANSWER_FINISH_REASONS:
            raise ValueError(f"cache entry {key}: finish_reason {finish_reason!r} is no answer")
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        entry = {
            "fields": fields,
            "text": text,
            "usage": usage,
            "latency_s": latency_s,
            "finish_reason": finish_reason,
            "served": dict(served or {}),
            "created": time.time(),
        }
        if refusal is not None:
            entry["refusal"] = refusal
        entry = json.loads(json.dumps(entry))  # the checksum covers what a reader will load
        entry["checksum"] = entry_checksum(entry)
        replace_durably(path, json.dumps(entry, ensure_ascii=False, sort_keys=True))
        return entry

    def __len__(self) -> int:
        return sum(1 for _ in self.directory.glob("??/*.json")) if self.directory.exists() else 0


class CachedBackend(Backend):
    """Wraps a backend: answers hits from the cache, sends only misses, stores each as it lands.

    Identical deterministic requests within one call are sent once. Results are stored through
    the wrapped backend's ``on_result`` callback the moment they complete, so a run killed
    halfway resumes by sending only what is missing.
    """

    def __init__(self, backend: Backend, cache: ResponseCache) -> None:
        self.backend = backend
        self.cache = cache
        self.name = backend.name
        self.model_id = backend.model_id
        self._identity = _identity_of(backend)
        self._streams_results = "on_result" in inspect.signature(backend.generate).parameters

    def __repr__(self) -> str:
        return f"CachedBackend({self.backend!r}, cache={str(self.cache.directory)!r})"

    # the wrapped backend's capabilities, forwarded (the contract of :class:`Backend`)
    mode = property(lambda self: self.backend.mode)
    max_concurrency = property(lambda self: self.backend.max_concurrency)
    min_tokens_per_s = property(lambda self: self.backend.min_tokens_per_s)
    routing = property(lambda self: self.backend.routing)
    schema_form_used = property(lambda self: self.backend.schema_form_used)
    concurrency_stats = property(lambda self: self.backend.concurrency_stats)
    batch_dir = property(lambda self: self.backend.batch_dir)
    sender = property(lambda self: self.backend.sender)

    def attach_meter(self, meter) -> None:
        self.backend.attach_meter(meter)

    def cache_identity(self) -> dict:
        return self._identity

    def key_fields(self, request: ChatRequest) -> dict:
        """The cache key fields of ``request`` for the wrapped backend."""
        return cache_key_fields(self.name, self.model_id, self._identity, request)

    def request_key(self, request: ChatRequest) -> str | None:
        """The cache key of ``request`` (None: not deterministic, never cached): what a plan counts
        duplicates by, without knowing how the cache keys its entries."""
        return cache_key(self.key_fields(request)) if request.deterministic else None

    def has_answer(self, request: ChatRequest) -> bool:
        """Whether the cache (or a stage answer) holds the answer the run would reuse for ``request``."""
        if not request.deterministic:
            return False
        fields = self.key_fields(request)
        return self.cache.get(cache_key(fields), fields) is not None

    def generate(
        self, requests: Sequence[ChatRequest], progress: str | None = None, on_result: ResultCallback | None = None
    ) -> list[GenerationResult]:
        """Results in request order; hits have ``cached=True``."""
        requests = list(requests)
        results = OrderedResults(len(requests), on_result)
        pending: dict[str, list[int]] = {}  # cache key -> positions waiting for that answer
        pending_fields: dict[str, dict] = {}
        uncacheable: list[int] = []
        for position, request in enumerate(requests):
            if not request.deterministic:
                uncacheable.append(position)
                continue
            fields = self.key_fields(request)
            key = cache_key(fields)
            if key in pending:
                pending[key].append(position)
                continue
            entry = self.cache.get(key, fields)
            if entry is None:
                pending[key] = [position]
                pending_fields[key] = fields
                continue
            hit = GenerationResult(
                request,
                entry["text"],
                usage=dict(entry.get("usage") or {}),
                latency_s=float(entry.get("latency_s") or 0.0),
                cached=True,
                finish_reason=_finish_reason_of(entry),
                served=dict(entry.get("served") or {}),
                attempts=0,
                refusal=entry.get("refusal"),
            )
            self.cache.used(entry)
            results.finish(position, hit)

        keys = list(pending)
        to_send = [requests[pending[key][0]] for key in keys] + [requests[p] for p in uncacheable]
        owners = [pending[key] for key in keys] + [[p] for p in uncacheable]
        logger.info(
            "%s %s: %d cached, %d to generate",
            self.name,
            self.model_id,
            len(requests) - sum(map(len, owners)),
            len(to_send),
        )
        if not to_send:
            return results.as_list()

        def deliver(sent_index: int, result: GenerationResult) -> None:
            if sent_index < len(keys) and _is_answer(result):
                key = keys[sent_index]
                stored = self.cache.put(
                    key,
                    pending_fields[key],
                    result.text,
                    result.usage,
                    result.latency_s,
                    result.finish_reason,
                    result.served,
                    result.refusal,
                )
                self.cache.used(stored)
            for position in owners[sent_index]:
                own = result if requests[position] is result.request else _for_request(result, requests[position])
                results.finish(position, own)

        if self._streams_results:
            self.backend.generate(to_send, progress=progress, on_result=deliver)
        else:
            for sent_index, result in enumerate(self.backend.generate(to_send, progress=progress)):
                deliver(sent_index, result)
        finished = results.as_list()
        warn_about_mismatches(self.model_id, finished)
        return finished


def warn_about_mismatches(model_id: str, results: Sequence[GenerationResult]) -> None:
    """One warning line when answers (cached or new) came from a model other than ``model_id``."""
    others = mismatch_counts(model_id, (result.served for result in results if result.ok))
    if others:
        served = ", ".join(f"{model} x{count}" for model, count in others.most_common())
        logger.warning(
            "%d of %d answers were served by another model than %s: %s",
            sum(others.values()),
            len(results),
            model_id,
            served,
        )


def _is_answer(result: GenerationResult) -> bool:
    """Only an answer is cached: text, not ended as an error, and blank only when it said ``stop``."""
    if not result.ok or not isinstance(result.text, str):
        return False
    if result.served.get(OFF_PIN):  # another model, provider or quantization: never under the pinned key
        return False
    if result.finish_reason in NOT_ANSWER_FINISH_REASONS:
        return False
    return bool(result.text.strip()) or result.refusal is not None or result.finish_reason in ("stop", "length")


def _for_request(result: GenerationResult, request: ChatRequest) -> GenerationResult:
    """A copy of ``result`` answering a duplicate ``request`` (same content, other request_id)."""
    return GenerationResult(
        request,
        result.text,
        error=result.error,
        usage=dict(result.usage),
        latency_s=result.latency_s,
        cached=result.cached,
        finish_reason=result.finish_reason,
        served=dict(result.served),
        attempts=0,  # the first copy carries what was sent (and its bill)
        refusal=result.refusal,
    )


def _finish_reason_of(entry: dict) -> str | None:
    """The stored finish_reason; None for entries written before it was stored."""
    value = entry.get("finish_reason")
    return value if isinstance(value, str) else None


def _identity_of(backend: Backend) -> dict:
    return json.loads(canonical_json(backend.cache_identity()))  # fail early on options that are not JSON
