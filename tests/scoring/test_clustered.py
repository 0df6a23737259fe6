"""Document-clustered resampling against a brute-force cluster bootstrap written here from scratch."""

from __future__ import annotations

import numpy as np
import pytest

from src.data.records import document_records, sentence_records
from src.data.schema import Document, Span
from src.scoring.clustered import cluster_index, cluster_sums, document_of, resampling_units
from src.scoring.stats import bootstrap_f1, bootstrap_f1_matrix, percentile_interval, resample_counts


def clustered_study(documents: int = 30, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """Sentences of ``documents`` documents whose scores share a per-document level (so clustering matters)."""
    rng = np.random.default_rng(seed)
    ids, rows = [], []
    for d in range(documents):
        level = rng.uniform(0.1, 0.9)
        for s in range(int(rng.integers(1, 9))):
            gold = int(rng.integers(1, 4))
            pred = int(rng.integers(0, 4))
            matched = min(gold, pred) * level
            ids.append(f"doc{d}.tml#s{s}")
            rows.append((matched, pred, gold))
    return ids, np.array(rows, dtype=np.float64)


def brute_force_f1(ids: list[str], stats: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """F1 per resample: each row of ``draws`` picks documents; every sentence of a picked document is added."""
    by_doc: dict[str, list[int]] = {}
    for n, instance in enumerate(ids):
        by_doc.setdefault(instance.rsplit("#s", 1)[0], []).append(n)
    documents = list(by_doc)
    out = []
    for row in draws:
        rows = [n for d in row for n in by_doc[documents[d]]]
        matched, pred, gold = stats[rows].sum(axis=0)
        out.append(2 * matched / (pred + gold) if pred + gold else 0.0)
    return np.array(out)


def test_document_of_sentence_and_document_ids():
    assert document_of("wsj_0006.tml#s3") == "wsj_0006.tml"
    assert document_of("wsj_0006.tml") == "wsj_0006.tml"  # a whole document is its own cluster
    assert document_of("a#sb") == "a#sb"  # not a sentence index
    index, clusters = cluster_index(["x#s0", "y#s0", "x#s1", "z"])
    assert index.tolist() == [0, 1, 0, 2] and clusters == 3
    index, clusters = cluster_index(["x#s0", "x#s1"], unit="instance")
    assert index.tolist() == [0, 1] and clusters == 2
    with pytest.raises(ValueError):
        cluster_index(["x"], unit="sentence")


def test_cluster_sums_add_rows_per_document():
    stats = np.arange(12, dtype=float).reshape(4, 3)
    sums = cluster_sums(stats, np.array([1, 0, 1, 0]), 2)
    np.testing.assert_array_equal(sums, [[3 + 9, 4 + 10, 5 + 11], [0 + 6, 1 + 7, 2 + 8]])
    stacked = cluster_sums(np.stack([stats, 2 * stats]), np.array([1, 0, 1, 0]), 2)
    np.testing.assert_array_equal(stacked[1], 2 * sums)


def test_same_draws_give_the_brute_force_f1_exactly():
    ids, stats = clustered_study()
    units = resampling_units(stats, ids)
    draws = np.random.default_rng(7).integers(0, units.shape[0], size=(300, units.shape[0]))
    np.testing.assert_allclose(
        bootstrap_f1(units, resample_counts(units.shape[0], 300, 7)), brute_force_f1(ids, stats, draws)
    )


def test_interval_agrees_with_an_independent_cluster_bootstrap_within_monte_carlo_error():
    ids, stats = clustered_study(documents=40, seed=3)
    units = resampling_units(stats, ids)
    project = percentile_interval(bootstrap_f1(units, resamples=4000, seed=11))
    documents = units.shape[0]
    rng = np.random.default_rng(12345)  # another stream, drawn by the brute force itself
    brute = np.quantile(brute_force_f1(ids, stats, rng.integers(0, documents, size=(4000, documents))), [0.025, 0.975])
    width = brute[1] - brute[0]
    assert abs(project[0] - brute[0]) < 0.1 * width and abs(project[1] - brute[1]) < 0.1 * width
    instance_level = percentile_interval(bootstrap_f1(stats, resamples=4000, seed=11))
    assert project[1] - project[0] > 1.2 * (instance_level[1] - instance_level[0])  # clustering widens here


def test_shared_document_draw_keeps_systems_paired():
    ids, stats = clustered_study(seed=5)
    other = stats.copy()
    other[:, 0] *= 0.9
    units = resampling_units(np.stack([stats, other]), ids)
    boot = bootstrap_f1_matrix(units, resamples=500, seed=2)
    assert np.all(boot[0] >= boot[1])  # B is A with fewer matches on every drawn document


def test_the_prepared_ids_name_their_document():
    """The rule reads the ids the prepare step writes: sentences ``{doc_id}#s{i}``, whole documents ``doc_id``."""
    text = "It fell on Friday. Then it rose."
    doc = Document("APW19980219.0476.tml", text, [Span(11, 17, "Friday", "TIMEX")], "timebank")
    records = sentence_records(doc, [(0, 18), (19, len(text))]) + document_records([doc])
    assert [r.id for r in records] == ["APW19980219.0476.tml#s0", "APW19980219.0476.tml#s1", "APW19980219.0476.tml"]
    assert all(document_of(r.id) == r.doc_id for r in records)
