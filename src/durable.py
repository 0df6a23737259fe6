"""Files that hold money or answers, replaced so that a crash or power cut leaves old or new bytes.

``os.replace`` alone is atomic for readers but not durable: after a power cut the rename can be
on disk before the data, leaving an empty ledger. :func:`replace_durably` writes a temp file
beside the target, fsyncs it, renames it over the target and fsyncs the folder.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def fsync_folder(folder: Path) -> None:
    """Make a rename or a new file in ``folder`` durable (a no-op where the OS cannot open folders)."""
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def replace_durably(path: Path, data: bytes | str) -> None:
    """Replace ``path`` by ``data`` (str: UTF-8) atomically and durably; the temp file is removed
    on any failure (a full or read-only disk raises OSError, the old file left as it was)."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        mode = path.stat().st_mode & 0o777  # a shared ledger keeps the permissions it was given
    except OSError:
        mode = 0o644
    descriptor, temp_name = tempfile.mkstemp(prefix=f".{path.name[:40]}-", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(descriptor, mode)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    fsync_folder(path.parent)
