"""What every derivation's command line shares: its base-set arguments and what it writes.

Each derive CLI reads a base test set (a seeded subset of it), writes the derived records,
a statistics JSON (DVC metrics) and a markdown page of examples; doing that here keeps the
three CLIs to their own logic.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from src.core.errors import DataError
from src.core.values import optional_int
from src.data.schema import Record, read_records, write_records
from src.data.splits import subset_by_id
from src.derive.examples import write_report
from src.derive.settings import add_settings_arguments

log = logging.getLogger(__name__)


def add_base_arguments(parser: argparse.ArgumentParser, output_help: str) -> None:
    """``--input``, ``--output``, ``--params``/``--sweep``, ``--seed``, ``--limit``, ``--stats`` and ``--examples``.

    ``--seed`` and ``--limit`` override the params files (:mod:`src.derive.settings`); left out,
    they are the params file's ``seed`` and the sweep file's ``sweep.derive_limit``.
    """
    parser.add_argument("--input", required=True, help="base test set (JSONL records)")
    parser.add_argument("--output", required=True, help=output_help)
    add_settings_arguments(parser)
    parser.add_argument("--seed", type=int, default=None, help="override of the params file's seed")
    parser.add_argument(
        "--limit",
        type=optional_int,
        default=argparse.SUPPRESS,  # absent: sweep.derive_limit; `--limit null` explicitly means all
        help="a seeded subset of N base records chosen by id (null: all; default: sweep.derive_limit)",
    )
    parser.add_argument("--stats", help="optional JSON file for the summary statistics")
    parser.add_argument("--examples", help="optional markdown file with a few original/perturbed pairs")


def read_base(args: argparse.Namespace) -> list[Record]:
    """The seeded subset of the base records to derive from (an empty file is an error)."""
    records = read_records(args.input)
    if not records:
        raise DataError(args.input, "no records to derive from")
    return subset_by_id(records, args.limit, args.seed)


def write_derived(
    args: argparse.Namespace, name: str, originals: Sequence[Record], derived: Sequence[Record], stats: dict[str, Any]
) -> None:
    """The derived records, their statistics and the examples page."""
    write_records(args.output, list(derived))
    log.info("%s: %s", name, json.dumps(stats))
    if args.stats:
        Path(args.stats).parent.mkdir(parents=True, exist_ok=True)
        Path(args.stats).write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")
    if args.examples:
        write_report(args.examples, f"{name} ({args.output})", originals, list(derived), seed=args.seed, stats=stats)
