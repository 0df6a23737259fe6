"""See and mend the response cache: ``python -m src.cache list|purge [filters]``.

The cache (:mod:`src.backends.cache`, ``paths.cache`` = ``.cache/generations``) is one JSON
file per answer. ``list`` counts and shows the entries a filter selects; ``purge`` counts them
too and deletes them only with ``--yes`` (without it, it is a dry run), so the next run asks for
those answers again. Filters combine (an entry must pass all):

    --model GLOB          requested model id (``fields.model_id``), shell pattern, any case
    --backend NAME        backend name (openai, llamacpp, transformers)
    --run "OVERRIDES"     the requests of one configuration, e.g. "model=qwen25_7b strategy=D"
    --finish-reason R     stored finish_reason (repeatable; ``none`` for a missing one)
    --empty               blank answers
    --mismatch            answers the provider says another model served (rule: src.backends.served)
    --older-than AGE      written more than AGE ago (``90s``, ``30m``, ``12h``, ``7d``)
    --newer-than AGE      written less than AGE ago
    --unsigned            entries written before checksums (used as they are)
    --invalid             entries a run cannot use (unreadable, wrong-typed, edited): a run treats
                          them as misses with a warning; ``purge --invalid --yes`` removes them

Examples::

    python -m src.cache list --empty
    python -m src.cache purge --model 'openai/*' --mismatch           # dry run: the count
    python -m src.cache purge --run "model=qwen25_7b strategy=D" --yes
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from src.backends.cache import read_entry
from src.backends.served import is_mismatch
from src.cli import EXIT_BAD_INPUT, OneLineArgumentParser

DEFAULT_DIRECTORY = Path(".cache/generations")
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_AGE_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass
class Entry:
    """One cache file: its parsed content, or why it cannot be used."""

    path: Path
    content: dict | None
    problem: str | None

    @property
    def key(self) -> str:
        return self.path.stem

    @property
    def model_id(self) -> str:
        return str(((self.content or {}).get("fields") or {}).get("model_id", ""))

    def describe(self, now: float) -> str:
        if self.content is None:
            return f"{self.key}  INVALID: {self.problem}"
        entry = self.content
        age = _format_age(now - entry["created"]) if entry.get("created") is not None else "age unknown"
        served = (entry.get("served") or {}).get("model", "-")
        text = entry["text"].strip().replace("\n", " ")
        preview = repr(text[:40] + ("..." if len(text) > 40 else ""))
        return f"{self.key}  {self.model_id}  served={served}  finish={entry.get('finish_reason')}  {age}  {preview}"


def age_seconds(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``12h`` or ``7d`` in seconds (argparse type)."""
    match = _AGE.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"expected an age like 90s, 30m, 12h or 7d, got {text!r}")
    return float(match.group(1)) * _AGE_UNITS[match.group(2)]


def _format_age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit} old"
    return f"{max(seconds, 0):.0f}s old"


def entries(directory: Path) -> Iterator[Entry]:
    """Every entry file under ``directory``, in key order."""
    for path in sorted(directory.glob("??/*.json")):
        try:
            content, problem = read_entry(path)
        except FileNotFoundError:  # removed by a concurrent purge
            continue
        yield Entry(path, content, problem)


def run_keys(overrides: str) -> set[str]:
    """Cache keys of every request the configuration ``overrides`` would send."""
    from src.runs.offline import configuration_keys  # Hydra and the prompts only when asked for

    return configuration_keys(overrides.split())


def selects(entry: Entry, args: argparse.Namespace, now: float, keys: set[str] | None) -> bool:
    """True when ``entry`` passes every filter given on the command line."""
    if args.invalid:
        return entry.content is None
    if entry.content is None:
        return False
    content = entry.content
    created = content.get("created")
    tests = [
        args.model is None or fnmatch.fnmatch(entry.model_id.lower(), args.model.lower()),
        args.backend is None or content["fields"].get("backend") == args.backend,
        keys is None or entry.key in keys,
        not args.finish_reason or str(content.get("finish_reason")).lower() in args.finish_reason,
        not args.empty or not content["text"].strip(),
        not args.mismatch or is_mismatch(entry.model_id, content.get("served")),
        args.older_than is None or (created is not None and now - created > args.older_than),
        args.newer_than is None or (created is not None and now - created < args.newer_than),
        not args.unsigned or content.get("checksum") is None,
    ]
    return all(tests)


def parser() -> argparse.ArgumentParser:
    main = OneLineArgumentParser(prog="python -m src.cache", description=__doc__.split("\n\n")[0])
    commands = main.add_subparsers(dest="command", required=True)
    for name, help_text in (("list", "count and show entries"), ("purge", "delete entries (dry run without --yes)")):
        command = commands.add_parser(name, help=help_text)
        command.add_argument("--dir", type=Path, default=DEFAULT_DIRECTORY, help="the cache (paths.cache)")
        command.add_argument("--model", help="requested model id, shell pattern")
        command.add_argument("--backend", help="backend name")
        command.add_argument("--run", metavar="OVERRIDES", help='a configuration, e.g. "model=qwen25_7b strategy=D"')
        command.add_argument(
            "--finish-reason", action="append", type=str.lower, default=[], help="stored finish_reason (none: missing)"
        )
        command.add_argument("--empty", action="store_true", help="blank answers")
        command.add_argument("--mismatch", action="store_true", help="served by another model")
        command.add_argument("--older-than", type=age_seconds, metavar="AGE", help="e.g. 7d")
        command.add_argument("--newer-than", type=age_seconds, metavar="AGE", help="e.g. 12h")
        command.add_argument("--unsigned", action="store_true", help="entries without a checksum")
        command.add_argument("--invalid", action="store_true", help="entries a run cannot use")
        if name == "list":
            command.add_argument("--show", type=int, default=20, metavar="N", help="entries to print (default 20)")
        else:
            command.add_argument("--yes", action="store_true", help="really delete")
    return main


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not args.dir.is_dir():
        print(f"error: --dir {args.dir}: no cache directory there", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        keys = run_keys(args.run) if args.run else None
    except ValueError as error:
        print(f"error: --run: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    now = time.time()
    total = invalid = 0
    chosen: list[Entry] = []
    for entry in entries(args.dir):
        total += 1
        invalid += entry.content is None
        if selects(entry, args, now, keys):
            chosen.append(entry)
    note = f"; {invalid} invalid (see --invalid)" if invalid and not args.invalid else ""
    print(f"{len(chosen)} of {total} entries selected in {args.dir}{note}")
    if args.command == "list":
        for entry in chosen[: max(args.show, 0)]:
            print(entry.describe(now))
        if len(chosen) > args.show:
            print(f"... {len(chosen) - args.show} more (--show N)")
        return 0
    if not args.yes:
        print(f"dry run: would delete {len(chosen)} entries; add --yes to delete them")
        return 0
    for entry in chosen:
        entry.path.unlink(missing_ok=True)
    print(f"deleted {len(chosen)} entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
