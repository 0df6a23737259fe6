"""TextAttack machinery for ``adv``: offline import, gold tracking, goal, constraints, bounded edits.

The victim here is a cheap deterministic stand-in with the ``TokenClassifier`` interface: it
tags time words only while enough "cue" words are present, so removing or misspelling cues
flips its predictions. The real fine-tuned victim is in ``test_adv_victim.py`` (slow).
"""

from __future__ import annotations

import editdistance
import nltk
import numpy as np
import pytest
import textattack  # noqa: E402  (after attack_env, which sets the NLTK data path)
from textattack.shared import AttackedText  # noqa: E402

from src.data.schema import Record, Span, check_spans
from src.derive import attack_env
from src.derive.adv import summarize  # noqa: E402
from src.derive.attack_constraints import ProtectGoldSpans, SpacyPartOfSpeech  # noqa: E402
from src.derive.attack_goal import MislabelGoldWords  # noqa: E402
from src.derive.attack_gold import GoldTracker  # noqa: E402
from src.derive.attack_recipes import CharAttackSettings, WordAttackSettings, char_transformation  # noqa: E402
from src.derive.attack_victim import VictimModel, WordProbs  # noqa: E402
from src.derive.attacker import AttackOutcome, build_attacker, choose  # noqa: E402

TIME_WORDS = {"monday", "last", "week", "friday", "1990", "yesterday", "month"}
CUES = {"reported", "quickly", "profits", "announced", "strong", "sharply"}


class CueVictim:
    """Tags time words B-T/I-T with probability 0.25 per cue word present (the argmax flips below 2 cues)."""

    labels = ["O", "B-T", "I-T"]

    def __init__(self):
        self.calls = 0

    def predict_word_probs(self, batch):
        self.calls += len(batch)
        out = []
        for words in batch:
            confidence = min(0.95, 0.25 * sum(w.lower() in CUES for w in words))
            probs = np.zeros((len(words), 3), dtype=np.float32)
            probs[:, 0] = 1.0
            previous_time = False
            for i, word in enumerate(words):
                if word.lower() in TIME_WORDS:
                    tag = 2 if previous_time else 1
                    probs[i, 0] = 0.8 * (1.0 - confidence)
                    probs[i, 3 - tag] = 0.2 * (1.0 - confidence)
                    probs[i, tag] = confidence
                previous_time = word.lower() in TIME_WORDS
            out.append(probs)
        return out


def record(id_: str, text: str, *strings: str) -> Record:
    spans, cursor = [], 0
    for string in strings:
        start = text.index(string, cursor)
        spans.append(Span(start, start + len(string), string, "TIMEX"))
        cursor = start + len(string)
    return Record(id_, "d", text, spans, "test")


RECORDS = [
    record("three-cues", "He quickly announced strong results on Monday, officials said.", "Monday"),
    record("cue-span", "Profits rose sharply last week and strong sales reported.", "last week"),
    record("no-cue", "Nothing happened yesterday.", "yesterday"),
]


def test_textattack_imports_offline_with_the_project_nltk_data():
    assert str(attack_env.default_nltk_data()) in nltk.data.path
    assert "the" in nltk.corpus.stopwords.words("english")
    assert hasattr(textattack, "Attack")
    with pytest.raises(FileNotFoundError, match="dvc pull"):
        attack_env.use_nltk_data("/nonexistent")


def test_tracker_follows_word_swaps_deletions_and_refuses_lost_spans():
    tracker = GoldTracker("TIMEX")
    rec = RECORDS[1]
    tracker.reset(rec)
    swapped = "Gains rose steeply last week and strong sales reported."
    assert tracker.spans_in(swapped) == [Span(19, 28, "last week", "TIMEX")]
    deleted = AttackedText(rec.text).delete_word_at_index(0).text  # "rose sharply last week ..."
    assert [s.start for s in tracker.spans_in(deleted)] == [deleted.index("last week")]
    assert tracker.spans_in("Profits rose sharply last weak and strong sales reported.") is None
    words, offsets, tags = tracker.bio(swapped)
    assert [t for w, t in zip(words, tags) if t != "O"] == ["B-T", "I-T"]
    assert tracker.word_offsets(swapped) == offsets


def test_goal_counts_mislabelled_gold_words_and_scores_confidence_first():
    tracker = GoldTracker("TIMEX")
    victim = VictimModel(CueVictim(), splitter=tracker.word_offsets)
    goal = MislabelGoldWords(victim, tracker, threshold=0.5)
    tracker.reset(RECORDS[1])
    (three_cues,) = victim([RECORDS[1].text])
    assert isinstance(three_cues, WordProbs)
    assert goal.mislabelling(three_cues).rate == 0.0
    (one_cue,) = victim(["Profits rose a lot last week and weak sales noted."])
    (two_cues,) = victim(["Profits rose sharply last week and weak sales noted."])
    assert goal.mislabelling(one_cue).rate == 1.0 and goal._is_goal_complete(one_cue, None)
    assert not goal._is_goal_complete(two_cues, None)
    assert goal._get_score(three_cues, None) < goal._get_score(two_cues, None) < goal._get_score(one_cue, None)
    with pytest.raises(ValueError):
        MislabelGoldWords(victim, tracker, threshold=0.0)


def test_gold_words_are_never_offered_for_modification():
    tracker = GoldTracker("TIMEX")
    tracker.reset(RECORDS[1])
    text = AttackedText(RECORDS[1].text)
    allowed = ProtectGoldSpans(tracker)._get_modifiable_indices(text)
    assert {text.words[i] for i in allowed} == {"Profits", "rose", "sharply", "and", "strong", "sales", "reported"}


def test_part_of_speech_constraint_keeps_coarse_tags():
    from src.derive.attacker import load_tagger

    constraint = SpacyPartOfSpeech(load_tagger())
    original = AttackedText("The company reported strong profits on Monday.")
    verb = original.replace_word_at_index(2, "announced")
    adjective = original.replace_word_at_index(2, "happy")
    kept = constraint._check_constraint_many([verb, adjective], original)
    assert [t.text for t in kept] == [verb.text]


def test_choose_prefers_success_then_damage_then_fewer_changes():
    def outcome(kind, status, rate, changed):
        return AttackOutcome(kind, status, "t", 10, 0.0, rate, changed)

    word_ok, char_ok = outcome("word", "succeeded", 0.5, 3), outcome("char", "succeeded", 1.0, 4)
    assert choose([word_ok, char_ok]) is char_ok
    assert choose([outcome("word", "failed", 0.9, 1), word_ok]) is word_ok
    tie_a, tie_b = outcome("word", "failed", 0.0, 2), outcome("char", "failed", 0.0, 1)
    assert choose([tie_a, tie_b]) is tie_b
    same_a, same_b = outcome("word", "succeeded", 1.0, 2), outcome("char", "succeeded", 1.0, 2)
    assert choose([same_a, same_b]) is same_a


def char_attacker(bound: int, **kwargs):
    """The character attack alone on the cue victim, ``bound`` edits at most."""
    return build_attacker(
        CueVictim(),
        "timex",
        seed=3,
        query_budget=200,
        threshold=0.5,
        word_settings=WordAttackSettings(),
        char_settings=CharAttackSettings(bound),
        kinds=["char"],
        **kwargs,
    )


@pytest.mark.parametrize("bound", [1, 4])
def test_deepwordbug_edits_stay_within_the_edit_distance_and_off_the_spans(bound):
    attacker = char_attacker(bound)
    derived = [attacker.attack_record(r) for r in RECORDS]
    for original, adv in zip(RECORDS, derived):
        check_spans(adv.text, adv.spans, adv.id)
        assert [s.text for s in adv.spans] == [s.text for s in original.spans]
        assert editdistance.eval(original.text, adv.text) <= bound
        assert adv.id == original.id and adv.extra["original_text"] == original.text
    by_id = {r.id: r for r in derived}
    assert by_id["no-cue"].extra["attack_status"] == "skipped" and by_id["no-cue"].text == RECORDS[2].text
    # two of the three cue words must be misspelt: out of reach with a single character edit
    three = by_id["three-cues"].extra
    assert three["success"] is (bound == 4)
    if bound == 4:
        assert three["attack"] == "char" and three["words_changed"] == 2
        assert three["mislabel_rate_before"] == 0.0 and three["mislabel_rate_after"] == 1.0
    stats = summarize(derived, attacker.counts)
    assert stats["skipped"] == 1 and stats["instances"] == 3
    if bound == 1:
        assert stats["succeeded"] == 0
    assert stats["succeeded"] + stats["failed"] == 2


def test_character_edits_at_every_position_offer_each_edit_kind_per_position():
    """One random position per edit kind left the search 4 candidates a word; at every
    position it can pick the edit that hurts the victim most (timex success 9 -> 12 of 36)."""
    text = AttackedText("reported yesterday")

    def candidates(every_position: bool) -> set[str]:
        transformed = char_transformation(every_position)(text, indices_to_modify={0})
        assert all(t.words[1] == "yesterday" for t in transformed)
        return {t.words[0] for t in transformed}

    one = candidates(False)
    every = candidates(True)
    assert len(one) <= 4
    deletions = {"reported"[:i] + "reported"[i + 1 :] for i in range(len("reported"))}
    assert deletions <= every, "every single-character deletion is a candidate"
    assert len(every) > 3 * len("reported")


def test_chained_character_attack_continues_from_the_word_text_and_is_judged_against_the_original():
    """``word+char``: one cue already swapped by a (failed) word attack leaves one misspelling
    to break the span, which a single character edit reaches and the character attack alone
    (two cues to misspell) does not; a span the start text made correct never counts."""
    attacker = char_attacker(1, criterion="any_span")
    three_cues = RECORDS[0]
    assert attacker.run(three_cues, "char").status == "failed"
    swapped = "He rapidly announced strong results on Monday, officials said."
    start = AttackOutcome("word", "failed", swapped, 12, 0.0, 0.0, 1)
    chained = attacker.run(three_cues, "char", start=start)
    assert chained.kind == "word+char" and chained.status == "succeeded"
    assert "rapidly" in chained.text and editdistance.eval(swapped, chained.text) == 1
    assert chained.queries > 12 and chained.spans_reference == 1 and chained.spans_broken == 1
    assert chained.words_changed == 2
    # the victim tags nothing on the original; cues added by the start text do not make a target
    no_cue = RECORDS[2]
    cued = AttackOutcome("word", "failed", "Nothing quickly reported yesterday.", 5, 0.0, 0.0, 2)
    assert attacker.run(no_cue, "char", start=cued).status == "skipped"
    assert attacker.goals["char"].pinned_reference is None
