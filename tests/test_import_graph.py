"""The modules under ``src/`` import each other without a cycle, and its packages keep the layers
the import-linter contracts of ``pyproject.toml`` declare.

Every module is parsed with ``ast`` (nothing is imported); every ``import`` statement
counts, wherever it is: module level, inside functions, under ``if TYPE_CHECKING:``.
An edge goes to the most specific ``src.*`` module named: ``from src.report import rq``
is an edge to ``src.report.rq`` when that is a module, else to the package
``src.report``. Relative imports are resolved against the importing module.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.paths import REPO_ROOT

SOURCE = REPO_ROOT / "src"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(SOURCE.rglob("*.py"))}


def _absolute(module: str | None, level: int, importer: str, is_package: bool) -> str:
    if not level:
        return module or ""
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _resolve(name: str, known: set[str]) -> str | None:
    """The longest prefix of ``name`` that is a known module."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return None


def import_graph() -> dict[str, set[str]]:
    """``src.*`` module -> the ``src.*`` modules it imports (anywhere in its body)."""
    found = modules()
    known = set(found)
    graph: dict[str, set[str]] = {name: set() for name in found}
    for name, path in found.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node.module, node.level, name, is_package)
                targets = [f"{base}.{alias.name}" if base else alias.name for alias in node.names]
            for target in targets:
                if not (target == "src" or target.startswith("src.")):
                    continue
                resolved = _resolve(target, known)
                if resolved and resolved != name:
                    graph[name].add(resolved)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as ``[a, b, ..., a]``, or None (iterative depth-first search, deterministic order)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            step = next(stack[-1], None)
            if step is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            if state.get(step) == 1:
                return path[path.index(step) :] + [step]
            if not state.get(step):
                state[step] = 1
                path.append(step)
                stack.append(iter(sorted(graph.get(step, ()))))
    return None


def test_the_graph_sees_function_level_and_type_checking_imports():
    graph = import_graph()
    assert "src.report.rq" in graph["src.report.analysis"]
    assert "src.report.analysis" in graph["src.report.figures"]  # under TYPE_CHECKING
    assert "src.runs.offline" in graph["src.cache"]  # inside a function
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_src_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph collapsed to the packages (and top-level modules) directly under ``src``."""

    def package(module: str) -> str:
        return ".".join(module.split(".")[:2])

    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if module == "src":
            continue
        edges = packages.setdefault(package(module), set())
        edges.update(package(t) for t in targets if t != "src" and package(t) != package(module))
    return packages


def test_the_packages_of_src_import_each_other_without_a_cycle():
    """This parser's own view of the acyclic-siblings contract import-linter enforces below."""
    assert find_cycle(package_graph({"src.a.x": {"src.b.y"}, "src.b.y": {"src.a.z"}, "src.a.z": set()})) == [
        "src.a",
        "src.b",
        "src.a",
    ]
    cycle = find_cycle(package_graph(import_graph()))
    assert cycle is None, "package cycle: " + " -> ".join(cycle)


def _lint_imports(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    command = [str(Path(sys.executable).parent / "lint-imports"), "--no-cache", *args]
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_layer_contracts_of_pyproject_hold():
    done = _lint_imports(REPO_ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_a_lower_layer_importing_a_higher_one_breaks_the_contract(tmp_path: Path):
    """The contracts bite: a package laid out as ours, whose low layer imports its high one."""
    for name, body in {"__init__": "", "high": "", "low": "import layered.high\n"}.items():
        (tmp_path / "layered").mkdir(exist_ok=True)
        (tmp_path / "layered" / f"{name}.py").write_text(body, encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.importlinter]\nroot_package = "layered"\n\n[[tool.importlinter.contracts]]\n'
        'name = "layers"\ntype = "layers"\nlayers = ["layered.high", "layered.low"]\n',
        encoding="utf-8",
    )
    done = _lint_imports(tmp_path)
    assert done.returncode == 1, done.stdout[-2000:]
    assert "layered.low is not allowed to import layered.high" in done.stdout
