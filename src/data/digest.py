"""File digests, read in blocks: DVC's md5 for data versions, SHA-256 for model weights."""

from __future__ import annotations

import hashlib
from pathlib import Path


def file_digest(path: Path | str, algorithm: str = "sha256") -> str:
    """The hex digest of a file's bytes."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
