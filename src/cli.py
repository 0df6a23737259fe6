"""Small helpers shared by the command-line entry points."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from src.core.errors import DataError
from src.core.values import MAX_RESAMPLES, MAX_SEED
from src.redact import install_log_redaction

MEMORY_LIMIT_BYTES = 2 * 2**30  # what one bootstrap may hold in memory (the machines here have 24 GB)
EXIT_BAD_INPUT = 2
#: The default of a flag whose value, when not given, comes from a settings file (``null`` is a value).
UNSET = object()
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a Unix tool whose reader went away


def setup_logging(level: int = logging.INFO, timestamps: bool = False) -> None:
    """An entry point's logging: one format, and no URI credential in any line (:mod:`src.redact`)."""

    stamp = "%(asctime)s " if timestamps else ""
    logging.basicConfig(level=level, format=f"{stamp}%(levelname)s %(name)s: %(message)s")
    install_log_redaction()


class UsageError(ValueError):
    """An option value that cannot work (e.g. a bootstrap too large for memory): exit code 2."""


class OneLineArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr (exit code 2), like bad input."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {one_line(message)} (see --help)\n")


def one_line(message: str) -> str:
    """``message`` with line breaks escaped, so that an error is always exactly one line."""
    return message.replace("\r", "\\r").replace("\n", "\\n")


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a decimal integer in ``[low, high]``, with a message naming the range."""

    def parse(text: str) -> int:
        try:
            value = int(text) if len(text) <= 30 else None
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            shown = text if len(text) <= 30 else text[:27] + "..."
            raise argparse.ArgumentTypeError(f"expected an integer from {low:,} to {high:,}, got {shown!r}")
        return value

    parse.__name__ = f"integer in [{low}, {high}]"
    return parse


seed_type = bounded_int(0, MAX_SEED)


def add_bootstrap_options(parser: argparse.ArgumentParser, flag: str, minimum: int, default: int, help: str) -> None:
    """The resampling options ``src.score`` and ``src.compare`` share: the number of resamples
    (``flag``), the bootstrap seed, and case-insensitive matching."""
    parser.add_argument(
        flag, type=bounded_int(minimum, MAX_RESAMPLES), default=default, metavar="N", help=f"{help}; at most 1,000,000"
    )
    parser.add_argument("--seed", type=seed_type, default=0, help="bootstrap seed (0 to 2**32 - 1)")
    parser.add_argument("--lowercase", action="store_true", help="compare words case-insensitively")


def check_resample_memory(resamples: int, n_instances: int, bytes_per_cell: int, option: str) -> None:
    """Refuse a bootstrap whose (resamples x instances) arrays would exceed ``MEMORY_LIMIT_BYTES``."""
    needed = resamples * n_instances * bytes_per_cell
    if needed > MEMORY_LIMIT_BYTES:
        fits = MEMORY_LIMIT_BYTES // (n_instances * bytes_per_cell)
        raise UsageError(
            f"{option} {resamples:,} on {n_instances:,} instances needs about {needed / 2**30:.1f} GiB "
            f"(limit {MEMORY_LIMIT_BYTES / 2**30:.0f} GiB); use at most {fits:,}"
        )


def _write_report(report: dict) -> int:
    """Print the report; a reader that went away (``| head``) ends the command quietly with 141."""
    try:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:
        try:  # Python flushes stdout again at exit: point it at /dev/null so that stays quiet
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass  # stdout is no real file (captured in tests)
        return EXIT_BROKEN_PIPE
    return 0


def print_json_report(build: Callable[[], dict]) -> int:
    """Run ``build`` and print its report as JSON; bad input is one line on stderr and exit code 2.

    ``src.score`` and ``src.compare`` share this so their output and error contract match.
    When stdout is closed early (``python -m src.score ... | head``) the command stops
    quietly with exit code 141, as a Unix tool killed by SIGPIPE does (no traceback,
    but a caller with ``set -o pipefail`` still sees that the report was not read whole).
    """

    try:
        report = build()
    except (DataError, UsageError, OSError) as exc:
        print(f"error: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except MemoryError:
        print("error: out of memory (fewer resamples or a smaller input may fit)", file=sys.stderr)
        return EXIT_BAD_INPUT
    return _write_report(report)
