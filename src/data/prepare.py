"""The ``prepare`` stage: raw corpora -> the JSONL datasets of the data contract.

Writes ``data/prepared/{task}/{name}.jsonl`` for task in timex/eventx/comp and name in
train/val/base/len/t2c (plus t2c_i2b2 when an i2b2 path is configured), and
``data/prepared/stats.json``. Usage: ``python -m src.data.prepare [--params params.yaml]``.
The stage only: the building is :mod:`src.data.datasets`, the cutting :mod:`src.data.records`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from src.cli import setup_logging
from src.core.settings import params_tree
from src.data.datasets import build_datasets, write_datasets
from src.launch import launch


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml", help="parameter file (the data and seed keys)")
    args = parser.parse_args(argv)
    setup_logging()
    cfg = params_tree(args.params)
    datasets = build_datasets(cfg, int(cfg["seed"]))
    write_datasets(datasets, Path(cfg["paths"]["prepared"]))


if __name__ == "__main__":
    launch(main)
