"""``adv`` end to end (slow): the word attack with WordNet, spaCy and MiniLM, and a real fine-tuned victim."""

from __future__ import annotations

import json
import os
import random

import pytest

from src.data.schema import Record, Span, check_spans, read_records, write_records

pytestmark = pytest.mark.slow

CONTEXTS = [
    "The company reported strong earnings {T} .",
    "Officials said {T} that the talks had collapsed .",
    "Sales rose sharply {T} after the merger was announced .",
    "The board approved the plan {T} , the chairman said .",
    "Prices fell {T} as traders worried about demand .",
    "The strike ended {T} when workers accepted the offer .",
    "Analysts expect growth to slow {T} , the report noted .",
    "The agency announced new rules {T} to protect investors .",
]
TIMEXES = ["last week", "Friday", "1990", "the third quarter", "two years ago", "yesterday", "next month", "this year"]


def synthetic(count: int, seed: int) -> list[Record]:
    """Sentences with one TIMEX each, the time expression at exact offsets."""
    rng = random.Random(seed)
    records = []
    for i in range(count):
        template, timex = rng.choice(CONTEXTS), rng.choice(TIMEXES)
        before, after = template.split("{T}")
        text = before + timex + after
        records.append(
            Record(
                f"s{seed}-{i}",
                f"doc{i % 7}",
                text,
                [Span(len(before), len(before) + len(timex), timex, "TIMEX")],
                "synthetic",
            )
        )
    return records


@pytest.fixture(scope="module")
def victim_checkpoint(tmp_path_factory):
    """MiniLM fine-tuned for a few dozen steps on synthetic timex sentences (a weak but real victim)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import set_seed

    from src.finetune.bio import tag_set
    from src.finetune.models import get_spec, load_model, load_tokenizer
    from src.finetune.train import TrainConfig, train_classifier

    set_seed(0)
    spec = get_spec("minilm")
    tokenizer = load_tokenizer(spec)
    model = load_model(spec, tag_set("TIMEX"), tokenizer)
    import dataclasses

    settings = dict(
        learning_rate=2e-4,
        warmup_steps=0,
        max_steps=40,
        train_batch_size=16,
        eval_steps=40,
        early_stopping_patience=10,
        max_length=64,
        logging_steps=10,
        seed=0,
        full_determinism=False,
        report_to="none",
        group_by_length=False,  # random batches: the weak victim these attacks were written against
    )
    try:  # newer TrainConfig: every field comes from params.yaml, these override it
        from src.finetune.train import load_config

        names = {f.name for f in dataclasses.fields(TrainConfig)}
        optional = {"num_threads": None, "include_negatives": False}
        config = load_config(overrides=settings | {k: v for k, v in optional.items() if k in names}, model="minilm")
    except ImportError:
        config = TrainConfig(**settings)
    out = tmp_path_factory.mktemp("victim")
    train_classifier(model, tokenizer, synthetic(240, 1), synthetic(16, 2), "TIMEX", config, out)
    return out


def _attack_timex(base, checkpoint, out, stats, seed: int, budget: int, criterion: str, *extra: str) -> None:
    """``python -m src.derive.adv`` on timex, in process."""
    from src.derive import adv

    adv.main(
        ["--input", str(base), "--checkpoint", str(checkpoint), "--task", "timex", "--output", str(out)]
        + ["--seed", str(seed), "--query-budget", str(budget), "--success-criterion", criterion]
        + ["--chain", "false", "--minilm-neighbours", "0", "--limit", "null"]  # the plain attacks, every record
        + ["--stats", str(stats), *extra]
    )


def test_real_victim_attack_changes_predictions(victim_checkpoint, tmp_path):
    from src.finetune.predict import TokenClassifier

    base = synthetic(8, 3)
    write_records(tmp_path / "base.jsonl", base)
    out, stats_path = tmp_path / "adv.jsonl", tmp_path / "stats.json"
    # word_share: the weak synthetic victim gets few gold spans exactly right, so SeqAttack's any_span
    # criterion skips most instances; the share of mislabelled gold words still drives the search
    _attack_timex(tmp_path / "base.jsonl", victim_checkpoint, out, stats_path, 7, 150, "word_share")
    derived = read_records(out)
    assert [r.id for r in derived] == [r.id for r in base]
    for original, record in zip(base, derived):
        check_spans(record.text, record.spans, record.id)
        assert [s.text for s in record.spans] == [s.text for s in original.spans]
        assert set(record.extra["attacks"]) == {"word", "char"}

    classifier = TokenClassifier.load(victim_checkpoint)
    before = classifier.predict_spans(base)
    after = classifier.predict_spans(derived)
    changed = [r.id for r, b, a in zip(derived, before, after) if b != a]
    assert changed, "the attack changed no prediction of the victim"
    assert all(derived[i].text != base[i].text for i, r in enumerate(derived) if r.id in changed)

    stats = json.loads(stats_path.read_text())
    assert stats["instances"] == 8 and stats["task"] == "timex" and stats["attacks"] == ["word", "char"]
    assert stats["instances_changed"] >= len(changed)
    assert 0.0 <= stats["success_rate"] <= 1.0 and stats["perturbation_rate"] > 0


def test_outputs_do_not_depend_on_the_number_of_worker_processes(victim_checkpoint, tmp_path):
    """Every record is seeded on its own and every worker computes on one thread: two worker
    processes write the bytes of one, records, stats and examples page alike (DVC outputs: the
    seconds per instance and the worker count are logged, not written)."""
    base = synthetic(6, 4)
    write_records(tmp_path / "base.jsonl", base)
    runs = {}
    for workers in (1, 2):
        folder = tmp_path / f"workers{workers}"
        folder.mkdir()
        out, stats, examples = folder / "adv.jsonl", folder / "stats.json", folder / "adv.md"
        _attack_timex(
            tmp_path / "base.jsonl",
            victim_checkpoint,
            out,
            stats,
            7,
            60,
            "word_share",
            "--workers",
            str(workers),
            "--examples",
            str(examples),
        )
        runs[workers] = (out.read_bytes(), stats.read_bytes(), examples.read_bytes().replace(str(folder).encode(), b""))
    assert runs[1] == runs[2]
    stats = json.loads(runs[1][1])
    assert "workers" not in stats and "seconds_per_instance" not in stats and stats["instances"] == 6


def test_word_attack_swaps_synonyms_and_keeps_spans():
    """Eventx runs the word attack only; here against a lexical stand-in victim, to see the swaps."""
    import numpy as np

    from src.derive.attack_recipes import CharAttackSettings, WordAttackSettings
    from src.derive.attacker import build_attacker

    class ContextVictim:
        """Tags 'announced' as an event only while 'company' or 'firm' precedes it in the sentence."""

        labels = ["O", "B-E", "I-E"]

        def predict_word_probs(self, batch):
            out = []
            for words in batch:
                cue = any(w.lower() in {"company", "firm"} for w in words)
                probs = np.tile(np.array([0.9, 0.05, 0.05], dtype=np.float32), (len(words), 1))
                for i, word in enumerate(words):
                    if word == "announced":
                        probs[i] = [0.2, 0.75, 0.05] if cue else [0.7, 0.25, 0.05]
                out.append(probs)
            return out

    text = "The company announced a new product yesterday."
    start = text.index("announced")
    record = Record("e1", "d", text, [Span(start, start + 9, "announced", "EVENT")], "t")
    attacker = build_attacker(
        ContextVictim(),
        "eventx",
        seed=1,
        query_budget=100,
        threshold=0.5,
        word_settings=WordAttackSettings(similarity_threshold=0.5),
        char_settings=CharAttackSettings(),
    )
    assert list(attacker.attacks) == ["word"]
    derived = attacker.attack_record(record)
    assert derived.extra["success"] and derived.extra["attack"] == "word"
    assert "company" not in derived.text and "announced" in derived.text
    assert derived.extra["changed_words"][0]["old"] == "company"
    check_spans(derived.text, derived.spans, "e1")


REAL_BASE = {"timex": "data/prepared/timex/base.jsonl"}


@pytest.mark.parametrize("criterion", ["any_span", "word_share"])
def test_attacked_records_keep_gold_spans_verbatim_at_valid_offsets(victim_checkpoint, tmp_path, criterion):
    """Three real base instances (synthetic ones when data/prepared is absent), attacked for real."""
    from pathlib import Path

    base_path = Path(__file__).resolve().parents[2] / REAL_BASE["timex"]
    if not base_path.is_file():
        base_path = tmp_path / "base.jsonl"
        write_records(base_path, synthetic(3, 5))
    out, stats_path, examples = tmp_path / "adv.jsonl", tmp_path / "stats.json", tmp_path / "adv.md"
    _attack_timex(
        base_path, victim_checkpoint, out, stats_path, 13, 60, criterion, "--limit", "3", "--examples", str(examples)
    )
    derived = read_records(out)
    originals = {r.id: r for r in read_records(base_path)}
    assert len(derived) == 3
    for record in derived:
        original = originals[record.id]
        assert record.extra["original_text"] == original.text
        assert [(s.text, s.label) for s in record.spans] == [(s.text, s.label) for s in original.spans]
        for span in record.spans:
            assert record.text[span.start : span.end] == span.text
        check_spans(record.text, record.spans, record.id)
        assert record.extra["success_criterion"] == criterion
    stats = json.loads(stats_path.read_text())
    for key in (
        "victim_f1_base",
        "victim_f1_adv",
        "delta",
        "p_value",
        "n",
        "perturbation_rate",
        "mean_similarity",
        "mean_queries",
    ):
        assert key in stats
    assert stats["n"] == 3 and stats["success_criterion"] == criterion
    assert examples.read_text().startswith("# adv")
