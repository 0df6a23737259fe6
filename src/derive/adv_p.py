"""``adv_p``: an LLM rewrites each test sentence while keeping the target expressions verbatim.

The model is asked for lexical substitutions, character noise and structural changes, and
told to copy every gold span exactly. A rewrite is accepted only when the gold spans can be
found in it again, unambiguously (:func:`src.derive.alignment.relocate_in_order`); otherwise
the request is retried with the attempt number in the prompt (a new cache key, same
temperature 0) up to ``max_attempts`` times, and then the instance is dropped and counted.
Generations go through the shared response cache. Usage::

    python -m src.derive.adv_p --input base.jsonl --output adv_p.jsonl --model-config conf/model/smollm2_135m.yaml \\
        --seed 13 --max-attempts 3 --cache-dir .cache/generations --stats stats.json
"""

from __future__ import annotations

import argparse
import json
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import yaml

from src.data.schema import Record
from src.derive.alignment import AlignmentError, changed_words, count_changed_words, derived_record, relocate_in_order
from src.derive.outputs import add_base_arguments, read_base, write_derived
from src.backends.base import Backend, ChatRequest
from src.data.text import words

log = logging.getLogger(__name__)

SYSTEM_PROMPT = "You rewrite sentences to test how robust information extraction systems are."
INSTRUCTIONS = (
    "Rewrite the sentence below so that it means the same but reads differently. Combine:\n"
    "- lexical substitutions (synonyms for some words),\n"
    "- character noise (a few small typos in some words),\n"
    "- structural changes (reorder clauses, active/passive, split or join phrases).\n"
    "Copy each of the following expressions exactly, character for character, with the same "
    "capitalisation, and use each exactly as many times as it is listed; never put typos in them "
    "and never repeat them elsewhere:\n"
)
MAX_LENGTH_RATIO = 2.0  # a "rewrite" with more than twice the words (+10) is rambling, not a rewrite
MIN_LENGTH_RATIO = 0.5  # with less than half the words it is a fragment (small models echo the target list)


def rewrite_request(record: Record, attempt: int, seed: int) -> ChatRequest:
    """The chat request for one rewrite attempt (attempts after the first say so, changing the cache key)."""
    targets = "\n".join(f"- {json.dumps(span.text, ensure_ascii=False)}" for span in sorted(record.spans))
    retry = (
        f"\nAttempt {attempt + 1}: an earlier rewrite changed or repeated an expression above. "
        "Write a different rewrite that keeps them exactly.\n"
        if attempt
        else ""
    )
    user = (
        f"{INSTRUCTIONS}{targets}\n{retry}\nAnswer with the rewritten sentence only.\n\n"
        f"Sentence: {record.text}"
    )
    max_tokens = min(1024, 64 + 3 * len(words(record.text)))
    return ChatRequest(
        messages=(("system", SYSTEM_PROMPT), ("user", user)),
        max_tokens=max_tokens,
        temperature=0.0,
        seed=seed,
        request_id=f"{record.id}#attempt{attempt + 1}",
    )


_LABEL = re.compile(r"^\s*(rewritten sentence|rewrite|sentence|answer|output)\s*:\s*", re.IGNORECASE)
_QUOTES = {'"': '"', "“": "”", "'": "'"}
_WORD_START = re.compile(r"\w")


def extract_rewrite(raw: str | None) -> str:
    """The rewritten sentence from a model answer: first non-empty line, labels, fences and quotes removed."""
    if not raw:
        return ""
    lines = [line.strip() for line in raw.strip().splitlines() if line.strip() and not line.strip().startswith("```")]
    if not lines:
        return ""
    text = _LABEL.sub("", lines[0]).strip()
    if len(text) >= 2 and text[0] in _QUOTES and text[-1] == _QUOTES[text[0]]:
        text = text[1:-1].strip()
    return text


def check_rewrite(record: Record, rewrite: str, extra: dict[str, Any]) -> Record:
    """The accepted ``adv_p`` record, or ``AlignmentError`` naming why the rewrite is rejected.

    Reasons beyond the alignment ones: ``empty``, ``unchanged`` (no word differs), ``length``
    (more than twice the words, the model rambled; or fewer than half, a fragment).
    """
    if not rewrite:
        raise AlignmentError("empty", "no rewrite in the answer")
    if count_changed_words(record.text, rewrite) == 0:
        raise AlignmentError("unchanged", "the rewrite has the same words as the original")
    n_old, n_new = _content_length(record.text), _content_length(rewrite)
    if n_new > MAX_LENGTH_RATIO * n_old + 10 or n_new < MIN_LENGTH_RATIO * n_old:
        raise AlignmentError("length", f"the rewrite has {n_new} words, the original {n_old}")
    spans = relocate_in_order(record.text, record.spans, rewrite)
    return derived_record(record, rewrite, spans, extra)


def _content_length(text: str) -> int:
    """Words that are not punctuation marks."""
    return sum(1 for w in words(text) if _WORD_START.match(w))


@dataclass
class RewriteOutcome:
    """Accepted records (in input order) and what happened on the way."""

    accepted: list[Record]
    dropped_ids: list[str]
    attempts: dict[str, int]  # id -> attempts used (accepted or not)
    rejections: Counter = field(default_factory=Counter)
    usage: Counter = field(default_factory=Counter)
    cached: int = 0


def rewrite_records(records: Sequence[Record], backend: Backend, max_attempts: int, seed: int) -> RewriteOutcome:
    """Rewrite every record, retrying rejected ones in rounds (one batched ``generate`` per round)."""
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    generator = {"backend": backend.name, "model_id": backend.model_id}
    accepted: dict[str, Record] = {}
    attempts: dict[str, int] = {}
    rejections: Counter = Counter()
    usage: Counter = Counter()
    cached = 0
    pending = list(records)
    for attempt in range(max_attempts):
        if not pending:
            break
        requests = [rewrite_request(record, attempt, seed) for record in pending]
        results = backend.generate(requests, progress=f"adv_p attempt {attempt + 1}")
        still_pending = []
        for record, result in zip(pending, results):
            attempts[record.id] = attempt + 1
            cached += bool(result.cached)
            usage.update({k: v for k, v in (result.usage or {}).items() if isinstance(v, (int, float))})
            if not result.ok:
                rejections["generation_error"] += 1
                still_pending.append(record)
                continue
            rewrite = extract_rewrite(result.text)
            extra = {
                "derivation": "adv_p",
                "original_text": record.text,
                "generator": generator,
                "attempts": attempt + 1,
                "words_changed": count_changed_words(record.text, rewrite),
                "changed_words": changed_words(record.text, rewrite),
                "seed": seed,
            }
            try:
                accepted[record.id] = check_rewrite(record, rewrite, extra)
            except AlignmentError as exc:
                rejections[exc.reason] += 1
                still_pending.append(record)
        pending = still_pending
    return RewriteOutcome(
        accepted=[accepted[r.id] for r in records if r.id in accepted],
        dropped_ids=[r.id for r in pending],
        attempts=attempts,
        rejections=rejections,
        usage=usage,
        cached=cached,
    )


def summarize(outcome: RewriteOutcome, backend: Backend, max_attempts: int) -> dict[str, Any]:
    """Acceptance rate, attempts, rejection reasons and the generator's identity."""
    n = len(outcome.attempts)
    accepted = outcome.accepted
    total_words = sum(len(words(r.extra["original_text"])) for r in accepted)
    changed = sum(r.extra["words_changed"] for r in accepted)
    return {
        "generator": {"backend": backend.name, "model_id": backend.model_id},
        "instances": n,
        "accepted": len(accepted),
        "dropped": len(outcome.dropped_ids),
        "acceptance_rate": len(accepted) / n if n else 0.0,
        "max_attempts": max_attempts,
        "accepted_by_attempt": dict(sorted(Counter(r.extra["attempts"] for r in accepted).items())),
        "requests": sum(outcome.attempts.values()),
        "cached_responses": outcome.cached,
        "rejection_reasons": dict(sorted(outcome.rejections.items())),
        "mean_words_changed": changed / len(accepted) if accepted else 0.0,
        "perturbation_rate": changed / total_words if total_words else 0.0,
        "usage": dict(outcome.usage),
    }


def parse_option(text: str) -> tuple[str, Any]:
    """``key=value`` with the value read as YAML (numbers, booleans, null stay typed)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), yaml.safe_load(value)


def generator_settings(args: argparse.Namespace) -> tuple[str, str, dict[str, Any]]:
    """(backend, model_id, options) from ``--model-config`` (a ``conf/model`` file) and flags, flags winning."""
    backend, model_id, options = None, None, {}
    if args.model_config:
        config = yaml.safe_load(Path(args.model_config).read_text(encoding="utf-8")) or {}
        backend, model_id, options = config.get("backend"), config.get("model_id"), dict(config.get("options") or {})
    backend = args.backend or backend
    model_id = args.model_id or model_id
    options.update(dict(args.option or []))
    if not backend or not model_id:
        raise SystemExit("adv_p: give --model-config, or --backend and --model-id")
    return backend, model_id, options


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_base_arguments(parser, "where to write the accepted rewrites")
    parser.add_argument("--model-config", help="a conf/model/*.yaml file (backend, model_id, options)")
    parser.add_argument("--backend", help="backend name (overrides the model config)")
    parser.add_argument("--model-id", help="model id (overrides the model config)")
    parser.add_argument("--option", action="append", type=parse_option, help="backend option KEY=VALUE (repeatable)")
    parser.add_argument("--max-attempts", type=int, default=3)
    parser.add_argument("--cache-dir", required=True, help="the shared response cache directory")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    from src.backends import create_backend
    from src.backends.cache import CachedBackend, ResponseCache

    records = read_base(args)
    name, model_id, options = generator_settings(args)
    backend = CachedBackend(create_backend(name, model_id=model_id, **options), ResponseCache(args.cache_dir))
    outcome = rewrite_records(records, backend, args.max_attempts, args.seed)
    stats = summarize(outcome, backend, args.max_attempts) | {"seed": args.seed, "limit": args.limit}
    write_derived(args, "adv_p", records, outcome.accepted, stats)


if __name__ == "__main__":
    main()
