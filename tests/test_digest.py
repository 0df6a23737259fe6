"""One digest helper: every content address comes from src/core/digest.py, and its framing of a
set of files is unambiguous (checked against hashlib directly, an oracle the helper does not share)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from hypothesis import given, settings, strategies as st

from src.backends.cache_entries import cache_key, canonical_json
from src.core.digest import digest, file_digest, files_digest
from src.core.locate import PROJECT_ROOT


def test_no_module_of_src_hashes_outside_the_digest_helper():
    hashing = re.compile(r"^\s*(import hashlib|from hashlib import)", re.MULTILINE)
    users = sorted(
        path.relative_to(PROJECT_ROOT).as_posix()
        for path in (PROJECT_ROOT / "src").rglob("*.py")
        if hashing.search(path.read_text(encoding="utf-8"))
    )
    assert users == ["src/core/digest.py"]


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=300), st.one_of(st.none(), st.integers(1, 64)))
def test_a_digest_is_hashlibs_cut_to_the_length_asked(data, length):
    assert digest(data, length) == hashlib.sha256(data).hexdigest()[:length]
    assert digest(data, length, "md5") == hashlib.md5(data).hexdigest()[:length]


def test_text_is_hashed_as_utf8_and_the_cache_key_did_not_move():
    fields = {"model": "m", "messages": [{"role": "user", "content": "é"}]}
    assert digest("é") == hashlib.sha256("é".encode()).hexdigest()
    # the answer cache's address, as stored by every earlier version
    assert cache_key(fields) == hashlib.sha256(canonical_json(fields).encode("utf-8")).hexdigest()


def test_a_file_is_read_whole_in_blocks(tmp_path: Path):
    path = tmp_path / "big.bin"
    data = bytes(range(256)) * 9000  # more than one block
    path.write_bytes(data)
    assert file_digest(path) == hashlib.sha256(data).hexdigest()
    assert file_digest(path, "md5") == hashlib.md5(data).hexdigest()


@settings(max_examples=50, deadline=None)
@given(st.binary(min_size=1, max_size=40), st.binary(max_size=40), st.integers(0, 39))
def test_moving_bytes_from_one_file_to_the_next_changes_the_digest(first, second, cut):
    cut = cut % len(first)
    moved = [("a", first[:cut]), ("b", first[cut:] + second)]
    assert files_digest([("a", first), ("b", second)]) != files_digest(moved)


def test_a_path_and_its_bytes_give_one_digest(tmp_path: Path):
    path = tmp_path / "w.bin"
    path.write_bytes(b"weights")
    expected = hashlib.sha256(b"w.bin\0weights\0").hexdigest()
    assert files_digest([("w.bin", path)]) == files_digest([("w.bin", b"weights")]) == expected
