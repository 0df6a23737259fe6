"""Content addresses, one helper for each shape of content: bytes or text, one file read in blocks,
and a set of named files. Every digest in the project comes from here, so a key's framing is
written once (a set of files frames each name and its bytes with NUL, so moving bytes from one
file to the next changes the digest) and a length cut is explicit at the call."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

BLOCK = 1 << 20


def digest(content: bytes | str, length: int | None = None, algorithm: str = "sha256") -> str:
    """The hex digest of ``content`` (text as UTF-8), cut to its first ``length`` characters."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    return hashlib.new(algorithm, data).hexdigest()[:length]


def file_digest(path: Path | str, algorithm: str = "sha256") -> str:
    """The hex digest of a file's bytes (DVC's md5 for data versions, SHA-256 for model weights)."""
    hasher = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(BLOCK), b""):
            hasher.update(block)
    return hasher.hexdigest()


def files_digest(named: Iterable[tuple[str, Path | bytes]], algorithm: str = "sha256") -> str:
    """The hex digest of named files in the given order: each name, NUL, its bytes (a path is read
    in blocks), NUL. The caller chooses the names (a file name, a path relative to the checkout)."""
    hasher = hashlib.new(algorithm)
    for name, content in named:
        hasher.update(name.encode("utf-8") + b"\0")
        if isinstance(content, bytes):
            hasher.update(content)
        else:
            with open(content, "rb") as handle:
                for block in iter(lambda: handle.read(BLOCK), b""):
                    hasher.update(block)
        hasher.update(b"\0")
    return hasher.hexdigest()
