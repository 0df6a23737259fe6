"""Point NLTK at the project's offline data before TextAttack is imported.

``import textattack`` builds a stopword constraint at import time and fails unless NLTK can
find ``corpora/stopwords``; WordNet synonyms need ``corpora/wordnet``. Both ship in
``<paths.raw>/nltk_data`` (docs/data.md, "Sources and licences"). Every ``attack_*`` module
imports this module before ``textattack``.
"""

from __future__ import annotations

from pathlib import Path

import nltk

from src.core.errors import ConfigError
from src.core.locate import PROJECT_ROOT
from src.core.settings import load_params

REPO_ROOT = PROJECT_ROOT


def default_nltk_data() -> Path:
    """``<paths.raw>/nltk_data`` from params.yaml (``data/raw`` when there is no params file)."""
    try:
        raw = load_params().paths.raw
    except ConfigError:
        raw = "data/raw"
    path = Path(raw) / "nltk_data"
    return path if path.is_absolute() else REPO_ROOT / path


def use_nltk_data(path: str | Path | None = None) -> Path:
    """Put ``path`` (default :func:`default_nltk_data`) first on NLTK's data path; returns it."""
    folder = Path(path) if path is not None else default_nltk_data()
    if not (folder / "corpora" / "stopwords").is_dir():
        raise FileNotFoundError(f"{folder} holds no corpora/stopwords: run `dvc pull data.dvc` (docs/data.md)")
    if str(folder) not in nltk.data.path:
        nltk.data.path.insert(0, str(folder))
    return folder


use_nltk_data()
