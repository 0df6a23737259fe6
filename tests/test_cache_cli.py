"""``python -m src.cache``: list and purge by filter, dry run first, invalid entries removable."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from src.backends.cache import ResponseCache, cache_key, cache_key_fields
from src.cache import main
from src.core.requests import ChatRequest

ROOT = Path(__file__).resolve().parents[1]
DAY = 86400.0


def _put(cache: ResponseCache, prompt: str, model: str, text: str, finish: str | None, served: dict, age_s: float):
    fields = cache_key_fields("openai", model, {}, ChatRequest((("user", prompt),)))
    key = cache_key(fields)
    cache.put(key, fields, text, {}, 0.1, finish, served)
    entry = json.loads(cache.path(key).read_text())
    if age_s:  # backdate it, keeping the checksum valid
        from src.backends.cache import entry_checksum

        entry["created"] -= age_s
        entry["checksum"] = entry_checksum(entry)
        cache.path(key).write_text(json.dumps(entry))
    return key


@pytest.fixture
def cache(tmp_path) -> ResponseCache:
    cache = ResponseCache(tmp_path / "cache")
    _put(cache, "a", "qwen/qwen-2.5-7b-instruct", '["a"]', "stop", {"model": "qwen/qwen-2.5-7b-instruct"}, 0)
    _put(cache, "b", "qwen/qwen-2.5-7b-instruct", "", "stop", {}, 10 * DAY)
    _put(cache, "c", "qwen/qwen-2.5-7b-instruct", '["c"]', "length", {"model": "fallback/other-7b"}, 0)
    _put(cache, "d", "openai/gpt-4o", '["d"]', "stop", {"model": "gpt-4o-2024-08-06"}, 3 * DAY)
    legacy = cache_key_fields("openai", "openai/gpt-4o", {}, ChatRequest((("user", "e"),)))
    cache.path(cache_key(legacy)).parent.mkdir(parents=True, exist_ok=True)
    cache.path(cache_key(legacy)).write_text(json.dumps({"fields": legacy, "text": "[]", "usage": {}, "latency_s": 0}))
    bad = cache.directory / "ff" / ("f" * 64 + ".json")
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text(json.dumps({"fields": legacy, "text": "x", "usage": "garbage"}))
    (cache.directory / "fe").mkdir()
    (cache.directory / "fe" / ("e" * 64 + ".json")).write_text('{"text": "trunc')
    return cache


def _selected(capsys, *args: str) -> int:
    assert main(list(args)) == 0
    first = capsys.readouterr().out.splitlines()[0]
    return int(first.split(" of ")[0])


@pytest.mark.parametrize(
    "filters, count",
    [
        ([], 5),
        (["--model", "qwen/*"], 3),
        (["--model", "OPENAI/GPT-4O"], 2),
        (["--backend", "openai"], 5),
        (["--backend", "llamacpp"], 0),
        (["--finish-reason", "length"], 1),
        (["--finish-reason", "stop", "--finish-reason", "none"], 4),
        (["--empty"], 1),
        (["--mismatch"], 1),  # gpt-4o-2024-08-06 is gpt-4o under the matching rule
        (["--older-than", "2d"], 2),
        (["--newer-than", "1h"], 2),
        (["--unsigned"], 1),
        (["--invalid"], 2),
        (["--model", "qwen/*", "--older-than", "1d"], 1),
    ],
)
def test_list_counts_what_each_filter_selects(cache, capsys, filters, count):
    assert _selected(capsys, "list", "--dir", str(cache.directory), *filters) == count


def test_list_shows_entries_and_counts_invalid_ones(cache, capsys):
    assert main(["list", "--dir", str(cache.directory), "--mismatch"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"1 of 7 entries selected in {cache.directory}; 2 invalid (see --invalid)"
    assert "served=fallback/other-7b" in out[1] and "finish=length" in out[1]
    assert main(["list", "--dir", str(cache.directory), "--invalid"]) == 0
    listing = capsys.readouterr().out
    assert "INVALID: field 'usage' has the wrong type" in listing and "INVALID: unreadable" in listing


def test_purge_is_a_dry_run_until_yes(cache, capsys):
    before = sorted(cache.directory.glob("??/*.json"))
    assert main(["purge", "--dir", str(cache.directory), "--empty"]) == 0
    assert "dry run: would delete 1 entries; add --yes to delete them" in capsys.readouterr().out
    assert sorted(cache.directory.glob("??/*.json")) == before
    assert main(["purge", "--dir", str(cache.directory), "--empty", "--yes"]) == 0
    assert "deleted 1 entries" in capsys.readouterr().out
    assert len(list(cache.directory.glob("??/*.json"))) == len(before) - 1
    assert main(["purge", "--dir", str(cache.directory), "--invalid", "--yes"]) == 0
    assert "deleted 2 entries" in capsys.readouterr().out
    assert _selected(capsys, "list", "--dir", str(cache.directory), "--invalid") == 0
    assert _selected(capsys, "list", "--dir", str(cache.directory)) == 4


def test_bad_arguments_are_one_line_and_exit_2(tmp_path):
    for args in (["list", "--dir", str(tmp_path / "missing")], ["purge", "--older-than", "soon"], ["drop"]):
        done = subprocess.run(
            [sys.executable, "-m", "src.cache", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
