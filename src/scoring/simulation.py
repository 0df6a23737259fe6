"""Simulated studies whose answer is known: the oracle that calibrates :mod:`src.scoring.calibrated`.

A study draws D documents; each holds a random number of sentences, each sentence a Poisson number
of gold spans (some none: empty gold) and each document a difficulty of its own (between-document
variation on the logit scale, as TimeBank's newswire documents and E3C's clinical notes differ).
A system finds each gold span with probability ``sigmoid(difficulty + skill)`` (an exact match,
LCS similarity 1, or a boundary match of similarity 0.5) and adds Poisson spurious spans. Two
systems are drawn independently given the documents, so:

* with equal ``skill`` and ``spurious`` they are exchangeable within every document: any
  better/worse verdict is a false one and the true difference is 0;
* otherwise the true micro-F1 difference is the limit over many documents, estimated by
  :func:`true_delta` on a large seeded draw (the oracle does not use the code under test).

Statistics are ``(matched, n_pred, n_gold)`` per sentence, summed per document by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Design:
    """The shape of a simulated study: documents, sentences per document, gold rate, between-document spread."""

    documents: int
    sentences: tuple[int, int] = (1, 10)  # sentences per document, uniform on [low, high]
    gold_rate: float = 1.2  # Poisson mean of gold spans per sentence (exp(-1.2) = 30% empty gold)
    spread: float = 1.0  # sd of document difficulty (logit scale)
    boundary_share: float = 0.2  # share of found spans that match at a boundary (similarity 0.5)


@dataclass(frozen=True)
class System:
    skill: float = 0.0  # logit shift of the chance to find a gold span
    spurious: float = 0.3  # Poisson mean of spurious spans per sentence


def _expit(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def draw_documents(
    design: Design, systems: tuple[System, ...], rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Per-document statistics (S, D, 3) of the systems and the sentences per document (D,)."""
    sizes = rng.integers(design.sentences[0], design.sentences[1] + 1, size=design.documents)
    difficulty = rng.normal(0.0, design.spread, size=design.documents)
    sentence_doc = np.repeat(np.arange(design.documents), sizes)
    gold = rng.poisson(design.gold_rate, size=sentence_doc.size)
    out = np.zeros((len(systems), design.documents, 3))
    for s, system in enumerate(systems):
        found = rng.binomial(gold, _expit(difficulty[sentence_doc] + system.skill))
        boundary = rng.binomial(found, design.boundary_share)
        matched = found - 0.5 * boundary
        predicted = found + rng.poisson(system.spurious, size=sentence_doc.size)
        for column, values in enumerate((matched, predicted, gold)):
            np.add.at(out[s, :, column], sentence_doc, values)
    return out, sizes


def true_delta(design: Design, systems: tuple[System, System], seed: int = 12345, documents: int = 400_000) -> float:
    """The population micro-F1 difference A - B: the ratio of expected sums, from one very large draw."""
    big = Design(documents, design.sentences, design.gold_rate, design.spread, design.boundary_share)
    stats, _ = draw_documents(big, systems, np.random.default_rng(seed))
    totals = stats.sum(axis=1)
    f1 = 2 * totals[:, 0] / (totals[:, 1] + totals[:, 2])
    return float(f1[0] - f1[1])


def skill_for_delta(design: Design, target: float, base: System = System(), documents: int = 200_000) -> System:
    """System B whose true difference from ``base`` (A - B) is ``target``: bisection on B's skill."""
    low, high = -6.0, 6.0
    for _ in range(40):
        middle = (low + high) / 2
        delta = true_delta(design, (base, System(middle, base.spurious)), documents=documents)
        low, high = (low, middle) if delta < target else (middle, high)
    return System((low + high) / 2, base.spurious)
