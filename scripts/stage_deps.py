"""Rewrite the code deps of every dvc.yaml stage to exactly the modules its command imports.

``python scripts/stage_deps.py`` (from the project root) keeps each stage's data, config and
model deps and replaces its ``src/...`` deps with the import closure of the ``python -m``
module it runs (through the launcher: ``python -m src STAGE``), the launcher, and the environment lock ``requirements.lock`` (:mod:`src.tracking.code_closure`,
the rule ``tests/test_dvc_graph.py`` checks).
Run it after changing imports or dvc.yaml.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from src.tracking.code_closure import ENVIRONMENT_FILES, command_deps  # noqa: E402


def rewrite(text: str) -> str:
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    command = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.search(r"python -m src", line):
            command = line
        if re.match(r"\s+deps:\s*$", line) and command:
            out.append(line)
            i += 1
            indent = None
            kept = []
            while i < len(lines) and re.match(r"\s+- ", lines[i]):
                indent = indent or lines[i][: lines[i].index("-")]
                dep = lines[i].strip().removeprefix("- ").split("#", 1)[0].strip()
                if not dep.startswith("src") and dep not in ENVIRONMENT_FILES:
                    kept.append(lines[i])
                i += 1
            out += [f"{indent}- {dep}\n" for dep in command_deps(command)] + kept
            command = None
            continue
        out.append(line)
        i += 1
    return "".join(out)


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    path = ROOT / "dvc.yaml"
    path.write_text(rewrite(path.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"{path}: code deps rewritten")
