"""Write the Hydra file of every strategy the vocabulary names and ``conf/strategy/`` lacks.

Hydra selects a strategy by its file (``strategy=C+I`` reads ``conf/strategy/C+I.yaml``) and
the ``run`` stage of ``dvc.yaml`` depends on it; the file holds only what can vary (``k``,
tuned later by ``src.tune_k``, and the generation budgets). After a new reasoning letter in
``src/study.py``, ``python -m src.prompts.strategy_files`` writes its combinations with the
defaults of :func:`~src.prompts.strategies.get_strategy`; files that exist are never touched.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from src.core.locate import conf_dir
from src.study import REASONING_PARTS, STRATEGY_ORDER

from .strategies import get_strategy

STRATEGY_DIR = conf_dir("strategy")


def strategy_file_text(name: str) -> str:
    """The YAML of a strategy file with the defaults of ``get_strategy(name)``."""
    strategy = get_strategy(name)
    letters = {part.letter: part.name for part in REASONING_PARTS}
    described = " + ".join(letters[letter] for letter in name.split("+"))
    return (
        f"# Strategy {name} - {described}; written by python -m src.prompts.strategy_files.\n"
        "# Its reasoning types follow from the name (src/prompts/strategies.py components_of).\n"
        f"name: {name}\n"
        f"k: {strategy.k}\n"
        f"max_tokens: {strategy.max_tokens}\n"
        f"max_tokens_document: {strategy.max_tokens_document}\n"
    )


def write_missing(directory: Path = STRATEGY_DIR, names: Sequence[str] = STRATEGY_ORDER) -> list[Path]:
    """Write ``<directory>/<name>.yaml`` for each name without one; the paths written."""
    written = []
    for name in names:
        path = directory / f"{name}.yaml"
        if not path.exists():
            path.write_text(strategy_file_text(name), encoding="utf-8")
            written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m src.prompts.strategy_files", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=STRATEGY_DIR, help="the Hydra strategy group (conf/strategy)")
    args = parser.parse_args(argv)
    for path in write_missing(args.dir):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
