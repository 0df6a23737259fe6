"""``adv``: TextAttack against the task's fine-tuned token classifier, gold spans untouched.

An attack succeeds by ``--success-criterion`` (:mod:`src.derive.attack_goal`): by default
SeqAttack's meaning, ``any_span`` (a gold span the victim predicted exactly on the original
is no longer predicted exactly); ``span_share`` (a share ``--success-threshold`` of those
spans); ``word_share`` (the share of gold words mislabelled reaches the threshold). The
word-level search tries the words next to a gold span first (``--adjacent-first``) and keeps
only grammatical swaps (no proper noun, case, part of speech and inflection kept).

Timex runs the word-level (TextFooler-style) and the character-level (DeepWordBug-style)
attack on every instance and keeps one per instance (:func:`choose`): the successful one;
if both or neither succeeded, the one that did more damage by the criterion (broken span
share, or mislabel rate for ``word_share``), then the higher mislabel rate of gold words; on
a tie the one that changed fewer words; then the word-level one. Eventx runs the word-level
attack only (with ``--eventx-char true`` also the character-level one). With ``--chain true``,
where both fail, the character attack runs once more from the word attack's best text
(``word+char``, its own query budget), still judged against the spans the victim predicted
exactly on the original. A failed attack keeps the best perturbation its search found (the
text that raised the score most within the query budget); a skipped instance (the goal is
already met on the original, or the victim gets no gold span right) keeps its original text.

The statistics hold the success rate, perturbation rate, sentence similarity (MiniLM cosine
of original and perturbed text), queries per instance, and the victim's LCS F1
on the base instances and on their ``adv`` versions with a paired bootstrap test
(``victim_f1_base``, ``victim_f1_adv``, ``delta``, ``p_value`` one-sided for base > adv, ``n``).
They are a DVC metrics file: what the machine decides (seconds per instance, the number of
worker processes) is logged, not written, so the same records give the same bytes anywhere.
Usage::

    python -m src.derive.adv --input base.jsonl --task timex --output adv.jsonl --stats stats.json

Every setting (seed, victim, query budget, criterion, ...) comes from ``params.yaml``
(``seed``, ``derive.victim``, ``derive.adv``) and the instance limit from ``sweep.yaml``
(``sweep.derive_limit``), as in the DVC stage; a flag overrides one for a hand run.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from src.cli import setup_logging
from src.core.values import optional_int
from src.data.schema import Record
from src.data.text import words
from src.derive import attack_env
from src.derive.attack_goal import SUCCESS_CRITERIA
from src.derive.attack_recipes import CharAttackSettings, WordAttackSettings
from src.derive.attacker import ATTACKS_BY_TASK, Attacker, build_attacker, grammar_rejections
from src.derive.examples import write_report
from src.derive.outputs import add_base_arguments, read_base, write_derived
from src.derive.sentence_similarity import load_sentence_model
from src.derive.settings import resolve
from src.derive.workers import default_workers, map_in_workers
from src.finetune.predict import TokenClassifier
from src.launch import launch
from src.rounding import rounded
from src.scoring.metrics import score_pairs
from src.scoring.stats import paired_bootstrap

log = logging.getLogger(__name__)

EXAMPLES_SHOWN = 10
BOOTSTRAP_RESAMPLES = 10_000
VICTIM_DIR = "models/finetuned"  # where the finetune stage writes {model}-{task}


def summarize(derived: Sequence[Record], counts: Counter) -> dict[str, Any]:
    """Success rate (over attempted instances), perturbation rate and shares, per dataset."""
    n = len(derived)
    status = Counter(r.extra["attack_status"] for r in derived)
    attempted = status["succeeded"] + status["failed"]
    total_words = sum(len(words(r.extra["original_text"])) for r in derived)
    changed = sum(r.extra["words_changed"] for r in derived)
    per_attack: dict[str, dict[str, Any]] = {}
    for key, value in counts.items():
        kind, outcome = key.split(":")
        per_attack.setdefault(kind, {})[outcome] = value
    for tally in per_attack.values():
        tried = tally.get("succeeded", 0) + tally.get("failed", 0)
        tally["success_rate"] = tally.get("succeeded", 0) / tried if tried else 0.0
    return {
        "instances": n,
        "succeeded": status["succeeded"],
        "failed": status["failed"],
        "skipped": status["skipped"],
        "errors": status["error"],
        "success_rate": status["succeeded"] / attempted if attempted else 0.0,
        "instances_changed": sum(1 for r in derived if r.text != r.extra["original_text"]),
        "share_changed": sum(1 for r in derived if r.text != r.extra["original_text"]) / n if n else 0.0,
        "mean_words_changed": changed / n if n else 0.0,
        "perturbation_rate": changed / total_words if total_words else 0.0,
        "mean_queries": sum(r.extra["total_queries"] for r in derived) / n if n else 0.0,
        "spans_broken": sum(r.extra.get("spans_broken", 0) for r in derived),
        "spans_correct_before": sum(r.extra.get("spans_correct_before", 0) for r in derived),
        "chosen_attack": dict(Counter(str(r.extra["attack"]) for r in derived)),
        "per_attack": per_attack,
    }


def sentence_similarity(sentence_model: Any, derived: Sequence[Record]) -> dict[str, Any]:
    """MiniLM cosine similarity of original and perturbed text over the changed instances."""
    changed = [r for r in derived if r.text != r.extra["original_text"]]
    if not changed or sentence_model is None:
        return {"mean_similarity": None, "min_similarity": None}
    a = sentence_model.encode(
        [r.extra["original_text"] for r in changed],
        convert_to_numpy=True,
        normalize_embeddings=True,
        show_progress_bar=False,
    )
    b = sentence_model.encode(
        [r.text for r in changed], convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
    )
    cosine = np.sum(a * b, axis=1)
    # an embedding's last bits differ between CPUs: written rounded (src/rounding.py)
    return rounded({"mean_similarity": float(cosine.mean()), "min_similarity": float(cosine.min())})


def victim_scores(
    classifier: Any, base: Sequence[Record], derived: Sequence[Record], seed: int, resamples: int = BOOTSTRAP_RESAMPLES
) -> dict[str, Any]:
    """The victim's LCS F1 on the base instances and on their ``adv`` versions, paired bootstrap.

    ``p_value`` is one-sided for "the victim scores higher on base than on adv"; ``delta`` is
    base minus adv. Predictions come from the victim as deployed (plain word split, windows).
    """

    by_id = {r.id: r for r in derived}
    base = [r for r in base if r.id in by_id]
    adv = [by_id[r.id] for r in base]
    scored_base = score_pairs(zip(base, classifier.predict_spans(list(base))))
    scored_adv = score_pairs(zip(adv, classifier.predict_spans(list(adv))))
    test = paired_bootstrap(scored_base.stats["lcs"], scored_adv.stats["lcs"], resamples=resamples, seed=seed)
    return {
        "victim_f1_base": test.f1_a,
        "victim_f1_adv": test.f1_b,
        "delta": test.delta,
        "delta_ci95": list(test.delta_ci),
        "p_value": test.p_value,
        "n": len(base),
        "bootstrap_resamples": test.resamples,
        "victim_strict_f1_base": scored_base.prf("strict")[2],
        "victim_strict_f1_adv": scored_adv.prf("strict")[2],
    }


def attack_kinds(args: argparse.Namespace) -> tuple[str, ...]:
    """The attacks run on every record of the task."""
    return ("word", "char") if args.task == "eventx" and args.eventx_char else ATTACKS_BY_TASK[args.task]


def attacker_from_args(args: argparse.Namespace, classifier: Any) -> Attacker:
    """The attacker the command line describes, against ``classifier``."""
    use_cf = {"auto": None, "yes": True, "no": False}[args.counter_fitted]
    attacker = build_attacker(
        classifier,
        args.task,
        args.seed,
        args.query_budget,
        args.success_threshold,
        WordAttackSettings(
            similarity_threshold=args.similarity_threshold,
            use_counter_fitted=use_cf,
            adjacent_first=args.adjacent_first,
            minilm_neighbours=args.minilm_neighbours,
        ),
        CharAttackSettings(
            max_edit_distance=args.max_edit_distance,
            adjacent_first=args.adjacent_first,
            every_position=args.char_every_position,
        ),
        kinds=attack_kinds(args),
        device=args.device,
        criterion=args.success_criterion,
    )
    attacker.chain = args.chain
    return attacker


@dataclass
class RecordAttack:
    """One record's ``adv`` version, with the attack tallies it added."""

    record: Record
    counts: Counter
    rejections: Counter


def record_attacker(args: argparse.Namespace) -> Callable[[Record], RecordAttack]:
    """A worker's attack function: loads the victim and builds the attacker once
    (:func:`src.derive.workers.map_in_workers` calls this in each worker process)."""

    if args.nltk_data:
        attack_env.use_nltk_data(args.nltk_data)
    attacker = attacker_from_args(args, TokenClassifier.load(args.checkpoint, device=args.device))

    def attack(record: Record) -> RecordAttack:
        counts, rejections = Counter(attacker.counts), Counter(grammar_rejections(attacker))
        derived = attacker.attack_record(record)
        return RecordAttack(derived, attacker.counts - counts, Counter(grammar_rejections(attacker)) - rejections)

    return attack


def parse_bool(value: str) -> bool:
    """``true``/``false`` (and yes/no, 1/0) for flags templated from params.yaml."""
    lowered = str(value).strip().lower()
    if lowered in ("true", "yes", "1", "on"):
        return True
    if lowered in ("false", "no", "0", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def build_parser() -> argparse.ArgumentParser:
    """The command line; every setting flag defaults to None: "take params.yaml"."""
    parser = argparse.ArgumentParser(prog="src.derive.adv", description=__doc__.split("\n\n")[0])
    add_base_arguments(parser, "where to write the attacked records")
    parser.add_argument("--task", required=True, choices=sorted(ATTACKS_BY_TASK))
    parser.add_argument(
        "--checkpoint", help="the victim: a src.finetune checkpoint folder (default: models/finetuned/VICTIM-TASK)"
    )
    parser.add_argument("--victim", help="the fine-tuned model attacked (default: params derive.victim)")
    parser.add_argument("--query-budget", type=int, help="victim queries per attack and instance")
    parser.add_argument(
        "--success-criterion",
        choices=SUCCESS_CRITERIA,
        help="any_span (SeqAttack): a correctly predicted gold span is no longer predicted exactly; "
        "span_share: a share --success-threshold of them; word_share: share of gold words "
        "mislabelled >= --success-threshold",
    )
    parser.add_argument(
        "--success-threshold", type=float, help="share for span_share / word_share (any_span ignores it)"
    )
    parser.add_argument(
        "--eventx-char", type=parse_bool, metavar="BOOL", help="eventx: also run the character-level attack"
    )
    parser.add_argument(
        "--chain",
        type=parse_bool,
        metavar="BOOL",
        help="where word and character attacks both fail, run the character attack again from the "
        "word attack's best text (its own query budget; success still against the original)",
    )
    parser.add_argument(
        "--adjacent-first", type=parse_bool, metavar="BOOL", help="search the words next to a gold span first"
    )
    parser.add_argument(
        "--minilm-neighbours",
        type=int,
        metavar="K",
        help="word attack: also try K nearest MiniLM input-embedding neighbours (0: WordNet only)",
    )
    parser.add_argument(
        "--bootstrap-resamples",
        type=int,
        default=BOOTSTRAP_RESAMPLES,
        help="paired bootstrap of the victim's F1, base vs adv",
    )
    parser.add_argument("--similarity-threshold", type=float, help="sentence similarity a perturbation keeps")
    parser.add_argument("--max-edit-distance", type=int, help="character attack: Levenshtein bound")
    parser.add_argument(
        "--char-every-position",
        type=parse_bool,
        metavar="BOOL",
        help="character attack: try each edit at every position of a word (false: one random position, "
        "as TextAttack's DeepWordBug recipe)",
    )
    parser.add_argument(
        "--counter-fitted",
        choices=("auto", "yes", "no"),
        default="auto",
        help="add counter-fitted embedding neighbours (yes: needs them in TextAttack's cache; auto, no: off)",
    )
    parser.add_argument("--nltk-data", help="NLTK data folder (default: <paths.raw>/nltk_data)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--workers",
        type=optional_int,
        help="processes attacking records at once, one CPU thread each (at least 1; default: one per CPU); "
        "the records do not depend on it",
    )
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, with every setting it leaves out read from the params files."""
    parser = build_parser()
    args = resolve(parser, parser.parse_args(argv), "adv")
    if args.workers is not None and args.workers < 1:
        parser.error(f"--workers must be at least 1, got {args.workers} (leave it out for one per CPU)")
    if args.checkpoint is None:
        args.checkpoint = f"{VICTIM_DIR}/{args.victim}-{args.task}"
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    setup_logging()
    if args.nltk_data:
        attack_env.use_nltk_data(args.nltk_data)

    records = read_base(args)
    workers = default_workers() if args.workers is None else args.workers
    started = time.perf_counter()
    attacked = map_in_workers(record_attacker, args, records, workers, desc=f"adv {args.task}")
    elapsed = time.perf_counter() - started
    derived = [a.record for a in attacked]
    counts = sum((a.counts for a in attacked), Counter())
    rejections = sum((a.rejections for a in attacked), Counter())
    classifier = TokenClassifier.load(args.checkpoint, device=args.device)
    stats = summarize(derived, counts) | sentence_similarity(load_sentence_model(device=args.device), derived)
    stats |= victim_scores(classifier, records, derived, args.seed, args.bootstrap_resamples)
    stats |= {
        "task": args.task,
        "seed": args.seed,
        "limit": args.limit,
        "query_budget": args.query_budget,
        "success_criterion": args.success_criterion,
        "success_threshold": args.success_threshold,
        "adjacent_first": args.adjacent_first,
        "eventx_char": args.eventx_char,
        "char_every_position": args.char_every_position,
        "chain": args.chain,
        "minilm_neighbours": args.minilm_neighbours,
        "attacks": list(attack_kinds(args)),
        "victim": str(args.checkpoint),
        "grammar_rejections": dict(rejections),
    }
    log.info("adv %s: %.2f s per instance, %d worker(s)", args.task, elapsed / max(len(derived), 1), workers)
    # records and stats by the shared writer; the examples page with EXAMPLES_SHOWN pairs
    write_derived(argparse.Namespace(**{**vars(args), "examples": None}), "adv", records, derived, stats)
    if args.examples:
        write_report(
            args.examples, f"adv ({args.output})", records, derived, n=EXAMPLES_SHOWN, seed=args.seed, stats=stats
        )


if __name__ == "__main__":
    launch(main)
