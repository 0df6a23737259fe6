"""The errors every entry point turns into one line and exit code 2."""

from __future__ import annotations

from pathlib import Path


class ConfigError(ValueError):
    """An override, config value or input that cannot run; reported as one line, exit code 2."""


class DataError(ValueError):
    """A corpus or dataset file that cannot be read; the message names the file (and line)."""

    def __init__(self, path: str | Path, message: str, line: int | None = None):
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.line = line
