"""The DVC graph declares what each stage really reads: its code (every module its command
imports, directly or not) and only the params keys it uses.

A stage whose deps miss a module it imports would not re-run when that module changes
(a silently stale result); a dep on code it never imports re-runs it for nothing.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
#: Packages whose members are chosen at run time by name (a registry): a stage that imports
#: the package depends on all of it.
DYNAMIC_PACKAGES = ("src/backends",)


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


def stages() -> list[tuple[str, dict]]:
    spec = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))
    out = []
    for name, stage in spec["stages"].items():
        body = stage.get("do", stage)
        out.append((name, body))
    return out


def command_module(cmd: str) -> str:
    match = re.search(r"python -m (src[\w.]*)", cmd)
    assert match, f"stage command does not run a src module: {cmd}"
    return match.group(1)


@pytest.mark.parametrize("name,stage", stages(), ids=[name for name, _ in stages()])
def test_stage_code_deps_are_exactly_what_its_command_imports(name: str, stage: dict):
    needed = {p.relative_to(ROOT).as_posix() for p in closure(command_module(stage["cmd"]))}
    for package in DYNAMIC_PACKAGES:
        if any(p.startswith(package + "/") for p in needed):
            needed = {p for p in needed if not p.startswith(package + "/")} | {package}
    declared = {d for d in (stage.get("deps") or []) if isinstance(d, str) and d.startswith("src")}
    missing = sorted(needed - declared)
    extra = sorted(declared - needed)
    assert not missing, f"{name}: deps miss modules its command imports: {missing}"
    assert not extra, f"{name}: deps name code its command never imports: {extra}"


@pytest.mark.parametrize("name,stage", stages(), ids=[name for name, _ in stages()])
def test_stage_params_are_keys_that_exist(name: str, stage: dict):
    params = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    sweep = yaml.safe_load((ROOT / "sweep.yaml").read_text(encoding="utf-8"))
    for entry in stage.get("params") or []:
        files = entry.items() if isinstance(entry, dict) else [("params.yaml", [entry])]
        for file, keys in files:
            source = {"params.yaml": params, "sweep.yaml": sweep}[file]
            for key in keys:
                node = source
                for part in key.split("."):
                    assert isinstance(node, dict) and part in node, f"{name}: {file} has no key {key}"
                    node = node[part]


def test_closure_follows_function_level_imports():
    files = {p.relative_to(ROOT).as_posix() for p in closure("src.run")}
    assert "src/backends/cache.py" in files  # imported inside build_backend
    assert "src/scoring/runner.py" in files and "src/study.py" in files
