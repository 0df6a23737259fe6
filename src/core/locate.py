"""Where the project's files are: the one place that knows the checkout's layout."""

from __future__ import annotations

from pathlib import Path

#: The checkout (the folder holding ``src/``, ``conf/``, ``params.yaml`` and ``dvc.yaml``).
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def project_relative(path: Path | str) -> str | None:
    """``path`` relative to the project root (POSIX), or None when it lies outside the project."""
    try:
        return Path(path).resolve().relative_to(PROJECT_ROOT).as_posix()
    except ValueError:
        return None


def conf_dir(*parts: str) -> Path:
    """``conf/`` (Hydra's configuration), or a path inside it."""
    return PROJECT_ROOT.joinpath("conf", *parts)


def project_file(name: str) -> Path:
    """A file at the checkout's root (``params.yaml``, ``dvc.yaml``, ``sweep.yaml``)."""
    return PROJECT_ROOT / name
