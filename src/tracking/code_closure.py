"""The project files a ``src`` module needs: its import closure (and the environment lock), as a
DVC stage's code deps.

``scripts/stage_deps.py`` writes each stage's deps from it, ``tests/test_dvc_graph.py`` checks
them with it and a run's code version (:mod:`src.tracking.keys`) digests the same files, so the
rule lives here once (plain ``ast``: nothing is imported).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from src.core.locate import PROJECT_ROOT
from src.launch import STAGES

ROOT = PROJECT_ROOT
#: Packages whose members are chosen at run time by name (a registry): a stage that imports
#: the package depends on all of it.
DYNAMIC_PACKAGES = ("src/backends",)
#: The exact library versions every stage runs on (scripts/setup.sh installs them): part of every
#: stage's code, so a changed lock re-runs the stages and changes their code version.
ENVIRONMENT_FILES = ("requirements.lock",)


def module_file(name: str) -> Path | None:
    """The file of a ``src.*`` module name (a package's ``__init__.py``), or None."""
    parts = name.split(".")
    path = ROOT.joinpath(*parts)
    if (path / "__init__.py").exists():
        return path / "__init__.py"
    if path.with_suffix(".py").exists():
        return path.with_suffix(".py")
    return None


def imported_modules(path: Path) -> set[str]:
    """``src.*`` modules a file imports anywhere (function-level imports included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    if path.name == "__init__.py":
        package = package.rsplit(".", 1)[0] + "." + "__init__"
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names if alias.name.startswith("src")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: -node.level]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if not name.startswith("src"):
                continue
            out.add(name)
            out |= {f"{name}.{alias.name}" for alias in node.names}
    return out


def closure(module: str) -> set[Path]:
    """Every project file a module needs, following imports (and a package's ``__init__``)."""
    seen: set[Path] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for depth in range(2, len(parts) + 1):  # parent packages run their __init__ first
            file = module_file(".".join(parts[:depth]))
            if file is not None and file not in seen:
                seen.add(file)
                todo.extend(imported_modules(file))
    return seen


def code_deps(module: str) -> list[str]:
    """The code deps of a stage running ``python -m module``: its closure, with each dynamic
    package it touches named as a whole folder, and the environment lock (:data:`ENVIRONMENT_FILES`)."""
    needed = {p.relative_to(ROOT).as_posix() for p in closure(module)}
    for package in DYNAMIC_PACKAGES:
        if any(p.startswith(package + "/") for p in needed):
            needed = {p for p in needed if not p.startswith(package + "/")} | {package}
    return sorted(needed) + list(ENVIRONMENT_FILES)


#: The launcher's own file: part of the code of every stage it dispatches (``python -m src STAGE``).
LAUNCHER_FILE = "src/__main__.py"


def command_module(command: str) -> str:
    """The ``src`` module a stage's command runs: ``python -m src STAGE`` (the launcher,
    :data:`src.launch.STAGES`) or ``python -m src.MODULE``; ValueError for any other command."""
    found = re.search(r"python -m (src[\w.]*)(?:\s+(\w+))?", command)
    if not found:
        raise ValueError(f"the command runs no src module: {command}")
    if found[1] != "src":
        return found[1]
    if found[2] not in STAGES:
        raise ValueError(f"python -m src {found[2]}: no such stage (the stages: {', '.join(STAGES)})")
    return STAGES[found[2]]


def command_deps(command: str) -> list[str]:
    """The code deps of a stage's command: its module's (:func:`code_deps`), and the launcher
    when the command goes through it."""
    deps = code_deps(command_module(command))
    if re.search(r"python -m src\s", command):
        deps = sorted({*deps[: -len(ENVIRONMENT_FILES)], LAUNCHER_FILE}) + list(ENVIRONMENT_FILES)
    return deps
