"""Document-clustered resampling: the bootstrap draws whole documents, as the study sampled them.

A base set holds sentences of a few dozen TimeBank documents; sentences of one document share
its topic, style and annotator, so resampling them as if independent understates the spread.
Here a resample draws documents with replacement and keeps all of a drawn document's instances.

Because micro-F1 depends only on summed per-instance statistics (:mod:`src.scoring.stats`),
a clustered resample of the instances is an ordinary resample of the *documents'* summed
statistics: :func:`cluster_sums` adds the rows of each document, and the count matrices of
:mod:`src.scoring.stats` (documents as columns) do the rest. Every configuration compared on
one instance set shares the same document draws, so paired tests stay paired.

Instance ids are ``{doc_id}#s{index}`` for sentences (``src.data.records.sentence_records``);
a whole-document instance (``len``) has its document's id and is its own cluster; derived
instances (``adv``, ``adv_p``, ``voc``) keep their base instance's id, hence its document.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

#: The resampling units: whole documents (the default) or single instances (the study's bootstrap).
DOCUMENT, INSTANCE = "document", "instance"
RESAMPLE_UNITS = (DOCUMENT, INSTANCE)

_SENTENCE_ID = re.compile(r"^(?P<doc>.+)#s\d+$")


def document_of(instance_id: str) -> str:
    """The document an instance came from: the id before ``#s<index>``, else the id itself."""
    match = _SENTENCE_ID.match(str(instance_id))
    return match.group("doc") if match else str(instance_id)


def cluster_index(ids: Sequence[str], unit: str = DOCUMENT) -> tuple[np.ndarray, int]:
    """(cluster of each instance (N,), number of clusters); clusters numbered by first appearance.

    With ``unit="instance"`` every instance is its own cluster (the instance-level bootstrap).
    """
    if unit not in RESAMPLE_UNITS:
        raise ValueError(f"unknown resampling unit {unit!r}; choose one of {RESAMPLE_UNITS}")
    if unit == INSTANCE:
        return np.arange(len(ids), dtype=np.int64), len(ids)
    numbers: dict[str, int] = {}
    index = np.fromiter((numbers.setdefault(document_of(i), len(numbers)) for i in ids), np.int64, len(ids))
    return index, len(numbers)


def cluster_sums(stats: np.ndarray, index: np.ndarray, clusters: int) -> np.ndarray:
    """Per-instance statistics (..., N, K) summed per cluster: (..., clusters, K).

    Resampling these rows with :mod:`src.scoring.stats` is resampling whole clusters.
    """
    stats = np.asarray(stats, dtype=np.float64)
    moved = np.moveaxis(stats, -2, 0)  # (N, ..., K)
    out = np.zeros((clusters, *moved.shape[1:]))
    np.add.at(out, np.asarray(index, dtype=np.int64), moved)
    return np.moveaxis(out, 0, -2)


def resampling_units(stats: np.ndarray, ids: Sequence[str], unit: str = DOCUMENT) -> np.ndarray:
    """The rows a bootstrap of ``unit`` resamples: ``stats`` (..., N, K) per document, or unchanged."""
    index, clusters = cluster_index(ids, unit)
    if unit == INSTANCE:
        return np.asarray(stats, dtype=np.float64)
    return cluster_sums(stats, index, clusters)
