"""Seeded, document-disjoint train/val/base splits and seeded subsampling."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

from src.core.digest import digest

T = TypeVar("T")


def split_documents(doc_ids: Sequence[str], val_share: float, base_share: float, seed: int) -> dict[str, list[str]]:
    """Assign whole documents to train/val/base (the test split) so that no document spans two splits.

    Documents are sorted before the seeded shuffle, so the result depends only on
    the set of ids and the seed, not on the order a reader returned them in.
    """
    if not (0 <= val_share < 1 and 0 < base_share < 1 and val_share + base_share < 1):
        raise ValueError(f"split shares must be in [0, 1) and sum below 1 (val={val_share}, base={base_share})")
    ids = sorted(set(doc_ids))
    if len(ids) != len(doc_ids):
        raise ValueError("document ids are not unique")
    random.Random(seed).shuffle(ids)
    n_base = round(len(ids) * base_share)
    n_val = round(len(ids) * val_share)
    return {
        "base": sorted(ids[:n_base]),
        "val": sorted(ids[n_base : n_base + n_val]),
        "train": sorted(ids[n_base + n_val :]),
    }


def sample_in_order(items: Sequence[T], limit: int | None, seed: int) -> list[T]:
    """Up to ``limit`` items chosen with the seed, returned in their original order."""
    if limit is None or len(items) <= limit:
        return list(items)
    chosen = sorted(random.Random(seed).sample(range(len(items)), limit))
    return [items[i] for i in chosen]


def subset_by_id(records: Sequence[T], limit: int | None, seed: int, key=lambda r: r.id) -> list[T]:
    """Up to ``limit`` records chosen by a seeded hash of their id, in their original order.

    Unlike positional sampling, the choice of a record depends only on its own id, so
    ``limit=N`` picks the same base instances in a derived dataset (adv, voc, ...) that
    keeps the base ids, and results stay paired instance by instance.
    """
    if limit is None or len(records) <= limit:
        return list(records)
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")

    def rank(record: T) -> str:
        return digest(f"{seed}:{key(record)}")

    chosen = set(sorted(range(len(records)), key=lambda i: rank(records[i]))[:limit])
    return [record for i, record in enumerate(records) if i in chosen]
