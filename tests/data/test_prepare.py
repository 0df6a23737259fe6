"""The prepare stage on the real corpora: contract, splits, caps and determinism."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from src.data.datasets import build_datasets, write_datasets
from src.data.schema import Document, Span, read_records
from src.data.segment import merge_crossing
from src.data.splits import sample_in_order, split_documents, subset_by_id
from src.study import TASK_ORDER as TASKS
from tests.helpers.paths import REPO_ROOT

PARAMS = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
NAMES = ("train", "val", "base", "len", "t2c")

pytestmark = pytest.mark.skipif(
    not (REPO_ROOT / "data/raw/timebank-1.2").is_dir(), reason="data/raw not pulled (dvc pull data.dvc)"
)


def _cfg() -> dict:
    cfg = copy.deepcopy(PARAMS)
    for key in ("timebank_dir", "aquaint_dir", "e3c_dir"):
        cfg["data"][key] = str(REPO_ROOT / cfg["data"][key])
    return cfg


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("prepared")
    write_datasets(build_datasets(_cfg(), PARAMS["seed"]), out)
    return out


def test_every_file_of_the_contract_is_written_and_valid(prepared):
    for task in TASKS:
        for name in NAMES:
            records = read_records(prepared / task / f"{name}.jsonl")  # validates every offset
            assert records, f"{task}/{name} is empty"
            for record in records:
                labels = {s.label for s in record.spans}
                assert labels == (
                    {"TIMEX"} if task == "timex" else {"EVENT"} if task == "eventx" else {"TIMEX", "EVENT"}
                )


def test_splits_are_disjoint_by_document(prepared):
    docs = {
        name: {r.doc_id for task in TASKS for r in read_records(prepared / task / f"{name}.jsonl")}
        for name in ("train", "val", "base")
    }
    assert not docs["train"] & docs["val"]
    assert not docs["train"] & docs["base"]
    assert not docs["val"] & docs["base"]
    len_docs = {r.doc_id for r in read_records(prepared / "timex" / "len.jsonl")}
    assert len_docs <= {r.doc_id for r in read_records(prepared / "eventx" / "len.jsonl")}


def test_caps_and_sizes_follow_the_study(prepared):
    stats = json.loads((prepared / "stats.json").read_text())
    cap = PARAMS["data"]["base_max_instances"]
    for task in TASKS:
        assert stats[task]["base"]["instances"] == cap
        assert stats[task]["len"]["instances"] <= PARAMS["data"]["len_max_documents"]
    assert stats["eventx"]["len"]["instances"] == PARAMS["data"]["len_max_documents"]
    assert stats["eventx"]["t2c"]["instances"] == PARAMS["data"]["t2c_max_event_instances"]
    # every E3C sentence with a TIMEX is kept (DATA.md: 311 sentences contain one)
    assert stats["timex"]["t2c"]["instances"] == 311
    assert stats["timex"]["t2c"]["spans"] == 380
    assert stats["timex"]["base"]["top_gold"][0][1] >= stats["timex"]["base"]["top_gold"][-1][1]


def test_len_instances_are_whole_documents(prepared):
    for record in read_records(prepared / "eventx" / "len.jsonl"):
        assert record.id == record.doc_id
    sentences = read_records(prepared / "eventx" / "base.jsonl")
    longest_sentence = max(len(r.text) for r in sentences)
    documents = read_records(prepared / "eventx" / "len.jsonl")
    assert sum(len(r.text) for r in documents) / len(documents) > 5 * longest_sentence / 2


def test_same_seed_gives_identical_files_and_another_seed_another_split(prepared, tmp_path):
    write_datasets(build_datasets(_cfg(), PARAMS["seed"]), tmp_path / "same")
    for task in TASKS:
        for name in NAMES:
            assert (tmp_path / "same" / task / f"{name}.jsonl").read_bytes() == (
                prepared / task / f"{name}.jsonl"
            ).read_bytes()
    other = build_datasets(_cfg(), PARAMS["seed"] + 1)
    base_docs = {r.doc_id for r in read_records(prepared / "timex" / "base.jsonl")}
    assert {r.doc_id for r in other["timex", "base"]} != base_docs


def test_split_documents_is_seeded_and_order_free():
    ids = [f"d{i}" for i in range(50)]
    a = split_documents(ids, 0.1, 0.4, seed=1)
    assert a == split_documents(list(reversed(ids)), 0.1, 0.4, seed=1)
    assert a != split_documents(ids, 0.1, 0.4, seed=2)
    assert (len(a["base"]), len(a["val"]), len(a["train"])) == (20, 5, 25)
    with pytest.raises(ValueError):
        split_documents(ids, 0.6, 0.5, seed=1)


def test_sample_in_order_keeps_order_and_cap():
    items = list(range(100))
    sample = sample_in_order(items, 10, seed=3)
    assert len(sample) == 10 and sample == sorted(sample)
    assert sample == sample_in_order(items, 10, seed=3)
    assert sample_in_order(items, None, seed=3) == items


class _Rec:
    def __init__(self, id_):
        self.id = id_


def test_subset_by_id_pairs_base_and_derived_instances():
    base = [_Rec(f"doc#s{i}") for i in range(40)]
    derived = [r for i, r in enumerate(base) if i % 7]  # e.g. adv_p dropped a few instances
    chosen = {r.id for r in subset_by_id(base, 10, seed=5)}
    chosen_derived = {r.id for r in subset_by_id(derived, 10, seed=5)}
    # the derived subset holds every chosen base instance that survived, plus replacements
    assert {i for i in chosen if int(i.split("s")[1]) % 7} <= chosen_derived
    assert subset_by_id(base, 10, seed=6) != subset_by_id(base, 10, seed=5)


def test_merge_crossing_joins_sentences_a_span_crosses():
    doc = Document("d", "One two. Three four.", [Span(4, 14, "two. Three", "EVENT")], "test")
    merged, merges = merge_crossing([(0, 8), (9, 20)], doc.spans)
    assert merged == [(0, 20)] and merges == 1
