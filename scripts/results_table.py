"""Write the README's current-results table from the analysis outputs, so no number is copied by hand.

``python scripts/results_table.py`` (after ``dvc repro``) reads what ``python -m src.analyze``
wrote under ``reports/`` (``analysis.json`` for the dataset order, seed and resamples,
``tables/configurations.csv`` for the configurations, ``tables/dataset_{task}_{dataset}.csv``
for each configuration's F1 and instance count) and replaces the block between
``<!-- results:start -->`` and ``<!-- results:end -->`` in ``README.md``. ``--check`` writes
nothing and exits 1 when the README's block differs from what the outputs give.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START = "<!-- results:start -->"
END = "<!-- results:end -->"
FINETUNED_KIND = "finetuned"


@dataclass(frozen=True)
class Configuration:
    """One column of the table: a row of ``configurations.csv``."""

    name: str
    model: str
    strategy: str
    kind: str


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def read_configurations(tables: Path) -> list[Configuration]:
    """Configurations in the analysis's order (prompted by strategy order, then fine-tuned)."""
    rows = read_csv(tables / "configurations.csv")
    return [Configuration(r["configuration"], r["model"], r["strategy"], r["kind"]) for r in rows]


def dataset_keys(analysis: dict, tables: Path) -> list[str]:
    """``task/dataset`` keys: the analysis's order, then any set only the fine-tuned models were scored on."""
    keys = list(analysis.get("datasets") or [])
    finetuned = tables / "finetuned.csv"
    if finetuned.exists():
        with finetuned.open(encoding="utf-8", newline="") as handle:
            header = next(csv.reader(handle), [])
        keys += [k for k in header[1:] if k not in keys]
    return keys


def read_scores(tables: Path, keys: Sequence[str]) -> dict[str, dict[str, tuple[float, int | None]]]:
    """``key -> configuration -> (f1, n)`` from the per-dataset tables."""
    scores: dict[str, dict[str, tuple[float, int | None]]] = {}
    for key in keys:
        task, dataset = key.split("/", 1)
        path = tables / f"dataset_{task}_{dataset}.csv"
        if not path.exists():
            raise FileNotFoundError(f"{path}: no table for {key} (run python -m src.analyze)")
        scores[key] = {}
        for row in read_csv(path):
            if row.get("f1") not in (None, ""):
                n = row.get("n")
                scores[key][row["configuration"]] = (float(row["f1"]), int(float(n)) if n not in (None, "") else None)
    return scores


def column_title(config: Configuration, single_prompted_model: bool) -> str:
    if config.kind == FINETUNED_KIND:
        return f"{config.model} (fine-tuned)"
    return config.strategy if single_prompted_model else config.name


def count_phrase(counts: list[int]) -> str:
    if not counts:
        return "instance counts not logged"
    low, high = min(counts), max(counts)
    return f"{low} instances per set" if low == high else f"{low}-{high} instances per set"


def describe(configs: Sequence[Configuration], scores: dict, analysis: dict, profile: str | None) -> str:
    """The one line above the table: profile, instances per set for each model, seed and resamples."""
    models: dict[tuple[str, str], list[int]] = {}
    for config in configs:
        counts = models.setdefault((config.model, config.kind), [])
        counts += [cell[1] for cells in scores.values() if (cell := cells.get(config.name)) and cell[1] is not None]
    parts = [
        f"`{model}` ({'fine-tuned' if kind == FINETUNED_KIND else kind}): {count_phrase(counts)}"
        for (model, kind), counts in models.items()
    ]
    head = f"Profile `{profile}`" if profile else "Profile not recorded"
    return (
        f"{head}; {'; '.join(parts)}; seed {analysis.get('seed')}, "
        f"{analysis.get('resamples')} bootstrap resamples. LCS F1 (the primary metric) per task/dataset."
    )


def render(analysis: dict, tables: Path, profile: str | None) -> str:
    """The block's text between the markers (no markers), ending with a newline."""
    configs = read_configurations(tables)
    keys = dataset_keys(analysis, tables)
    scores = read_scores(tables, keys)
    prompted_models = {c.model for c in configs if c.kind != FINETUNED_KIND}
    titles = [column_title(c, len(prompted_models) == 1) for c in configs]
    lines = [
        describe(configs, scores, analysis, profile),
        "",
        "| task/dataset | " + " | ".join(titles) + " |",
        "|---|" + "---|" * len(titles),
    ]
    for key in keys:
        cells = [f"{scores[key][c.name][0]:.3f}" if c.name in scores[key] else "–" for c in configs]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def replace_block(readme: str, block: str) -> str:
    """``readme`` with the text between the markers replaced by ``block``."""
    start, end = readme.find(START), readme.find(END)
    if start < 0 or end < start:
        raise ValueError(f"README has no {START} ... {END} block")
    head = readme[: start + len(START)]
    return head + "\n" + block + readme[end:]


def read_profile(sweep: Path) -> str | None:
    """The active profile's name (``sweep.profile``, or a top-level ``profile``) when the sweep file says it."""
    if not sweep.exists():
        return None
    import yaml

    data = yaml.safe_load(sweep.read_text(encoding="utf-8")) or {}
    name = (data.get("sweep") or {}).get("profile") or data.get("profile")
    return str(name) if name else None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python scripts/results_table.py", description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=Path, default=ROOT / "reports", help="the analysis output folder")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    parser.add_argument("--sweep", type=Path, default=ROOT / "sweep.yaml", help="where the profile name is read")
    parser.add_argument("--profile", default=None, help="the profile's name (default: read from --sweep)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the README's block differs")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    analysis = json.loads((args.reports / "analysis.json").read_text(encoding="utf-8"))
    block = render(analysis, args.reports / "tables", args.profile or read_profile(args.sweep))
    readme = args.readme.read_text(encoding="utf-8")
    updated = replace_block(readme, block)
    if args.check:
        if updated != readme:
            print(
                f"{args.readme}: the results block differs from {args.reports}; run python scripts/results_table.py",
                file=sys.stderr,
            )
            return 1
        return 0
    if updated != readme:
        args.readme.write_text(updated, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
