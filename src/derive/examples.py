"""A readable report of a derived dataset: a few original/perturbed pairs, spans and edits marked.

Gold spans are **bold**; in the perturbed text every changed run of words is shown as
``~~old~~ _new_`` (an insertion as ``_new_``, a deletion as ``~~old~~``). A researcher reads it to judge whether the perturbations are sensible.
Usage::

    python -m src.derive.examples --base base.jsonl --derived voc.jsonl --output voc.md --title "timex voc" --seed 13
"""

from __future__ import annotations

import argparse
import difflib
import json
import random
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from src.data.schema import Record, Span, read_records
from src.data.text import word_offsets

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_~\[\]<>#|])")
# when several marks fall on one offset: closing marks, then a deletion, then opening marks
_CLOSE, _DELETED, _OPEN = 0, 1, 2


def _escape(text: str) -> str:
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def render(text: str, spans: Sequence[Span], original: str | None = None) -> str:
    """``text`` as markdown with spans bold and, given ``original``, word changes as ``~~old~~ new``."""
    marks: list[tuple[int, int, str]] = []
    for span in spans:
        marks += [(span.start, _OPEN, "**"), (span.end, _CLOSE, "**")]
    if original is not None:
        old, new = word_offsets(original), word_offsets(text)
        old_words, new_words = [original[a:b] for a, b in old], [text[a:b] for a, b in new]
        matcher = difflib.SequenceMatcher(None, old_words, new_words, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                continue
            removed = "~~" + _escape(original[old[i1][0] : old[i2 - 1][1]]) + "~~" if i1 < i2 else ""
            if j1 < j2:
                marks += [(new[j1][0], _OPEN, "_"), (new[j2 - 1][1], _CLOSE, "_")]
                if removed:
                    marks.append((new[j1][0], _DELETED, removed + " "))
            else:
                at = new[j1][0] if j1 < len(new) else len(text)
                marks.append((at, _DELETED, " " + removed if at else removed + " "))
    out, cursor = [], 0
    for position, _, mark in sorted(marks, key=lambda m: (m[0], m[1])):
        out.append(_escape(text[cursor:position]))
        out.append(mark)
        cursor = position
    out.append(_escape(text[cursor:]))
    return "".join(out)


def describe(derived: Record) -> str:
    """One line of per-instance facts from the derivation's extra keys."""
    extra, facts = derived.extra, []
    if extra.get("derivation") == "adv":
        facts.append(f"attack {extra.get('attack') or 'none'}, {extra.get('attack_status')}")
        facts.append(
            f"mislabel rate {extra.get('mislabel_rate_before', 0):.2f} -> {extra.get('mislabel_rate_after', 0):.2f}"
        )
        facts.append(f"{extra.get('queries')} queries")
    if extra.get("derivation") == "adv_p":
        generator = extra.get("generator") or {}
        facts.append(f"{generator.get('backend')}/{generator.get('model_id')}, attempt {extra.get('attempts')}")
    if extra.get("derivation") == "voc" and extra.get("replacements"):
        pairs = ", ".join(f"{_escape(old)} -> {_escape(new)}" for old, new in extra["replacements"].items())
        facts.append(f"replaced: {pairs}")
    facts.append(f"{extra.get('words_changed', 0)} word(s) changed")
    return "; ".join(facts)


def select_examples(derived: Sequence[Record], n: int, seed: int) -> list[Record]:
    """Up to ``n`` changed instances (successful attacks first when there are any), in file order."""
    changed = [r for r in derived if r.text != r.extra.get("original_text", r.text)]
    preferred = [r for r in changed if r.extra.get("success")] or changed
    rest = [r for r in changed if r not in preferred]
    rng = random.Random(seed)
    picked = rng.sample(preferred, min(n, len(preferred)))
    picked += rng.sample(rest, min(n - len(picked), len(rest)))
    order = {r.id: i for i, r in enumerate(derived)}
    return sorted(picked, key=lambda r: order[r.id])


def report(
    title: str,
    originals: dict[str, Record],
    derived: Sequence[Record],
    n: int = 5,
    seed: int = 0,
    stats: dict[str, Any] | None = None,
) -> str:
    """The markdown report text."""
    lines = [f"# {title}: examples", ""]
    changed = sum(1 for r in derived if r.text != r.extra.get("original_text", r.text))
    lines += [f"{len(derived)} instances, {changed} changed. Gold spans in **bold**; edits as ~~old~~ _new_.", ""]
    if stats:
        lines += ["```json", json.dumps(stats, indent=2), "```", ""]
    for record in select_examples(derived, n, seed):
        original = originals.get(record.id)
        if original is None:
            raise KeyError(f"derived record {record.id!r} has no base record")
        lines += [
            f"## {_escape(record.id)}",
            "",
            f"*{describe(record)}*",
            "",
            f"- original: {render(original.text, original.spans)}",
            f"- perturbed: {render(record.text, record.spans, original.text)}",
            "",
        ]
    if not changed:
        lines += ["No instance was changed.", ""]
    return "\n".join(lines)


def write_report(
    path: str | Path,
    title: str,
    originals: Sequence[Record],
    derived: Sequence[Record],
    n: int = 5,
    seed: int = 0,
    stats: dict[str, Any] | None = None,
) -> Path:
    """Write :func:`report` to ``path`` (folders created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report(title, {r.id: r for r in originals}, derived, n, seed, stats), encoding="utf-8")
    return path


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the base records the derived set was made from")
    parser.add_argument("--derived", required=True, help="the derived records (voc, adv, adv_p)")
    parser.add_argument("--output", required=True, help="markdown file to write")
    parser.add_argument("--title", required=True)
    parser.add_argument("--n", type=int, default=5, help="examples to show")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stats", help="optional stats JSON to include")
    args = parser.parse_args(argv)
    stats = json.loads(Path(args.stats).read_text(encoding="utf-8")) if args.stats else None
    write_report(args.output, args.title, read_records(args.base), read_records(args.derived), args.n, args.seed, stats)


if __name__ == "__main__":
    main()
