"""Point NLTK at the project's offline data before any test module here imports textattack."""

from src.derive import attack_env  # noqa: F401
