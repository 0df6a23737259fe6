"""Imports sit at the top of a module (tests/test_import_graph.py: and form no cycle).

An import inside a function is allowed only for what is slow or optional to load, named here
with the reason, so a command that never uses it (``python -m src.plan``, ``python -m src.cache``)
starts without it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Top-level package -> why a function may import it where it is used.
LAZY = {
    "torch": "seconds to import; only training, attacks and the transformers backend use it",
    "transformers": "seconds to import; only training, tokenizer counts and the transformers backend",
    "tokenizers": "loaded with a fine-tuned model's tokenizer only",
    "seqeval": "the trainer's evaluation only",
    "llama_cpp": "the GGUF engine: loads native libraries; only local runs use it",
    "spacy": "a pipeline load per process; only segmentation and the derive stages use it",
    "nltk": "WordNet's corpus reader: the attacks only",
    "textattack": "imports torch and TensorFlow-era modules; the adv stage only",
    "sentence_transformers": "imports torch; the similarity constraints only",
    "matplotlib": "the report's figures only (and its backend is chosen before pyplot loads)",
    "mlflow": "over a second to import; planning, caching and dry runs never log",
    "numpy": "src.numerics asks it for the CPU's features once the process is pinned: numpy loads once, pinned",
}
#: Project modules imported lazily, with why (each loads a heavy package above at its top).
LAZY_PROJECT = {
    "src.derive.attack_constraints": "imports textattack",
    "src.runs.offline": "Hydra's composition and the prompts: `python -m src.cache` without a configuration needs none",
    "src.planning.profile": "the derive stages' prompts, whose package loads NLTK: only `src.plan --sweep`",
}


def _imports(tree: ast.AST):
    """(node, inside a function, under TYPE_CHECKING) for every import of ``tree``."""

    def walk(node: ast.AST, in_function: bool, type_only: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, in_function, type_only
            checking = isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            yield from walk(child, inner, type_only or checking)

    yield from walk(tree, False, False)


def _module(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    return [node.module or ""]


def _sources() -> dict[str, ast.AST]:
    trees = {}
    for path in sorted((ROOT / "src").rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        trees[name] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return trees


def test_a_function_imports_only_what_is_slow_or_optional_to_load():
    misplaced = []
    for name, tree in _sources().items():
        for node, in_function, type_only in _imports(tree):
            if not in_function or type_only:
                continue
            for module in _module(node):
                if module.split(".")[0] not in LAZY and module not in LAZY_PROJECT:
                    misplaced.append(f"{name}:{node.lineno} imports {module} inside a function")
    assert not misplaced, "\n".join(misplaced)


def test_the_rules_catch_what_they_forbid():
    """The walk finds a function-level import and a TYPE_CHECKING one apart."""
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pandas\n"
        "def f():\n    import yaml\n    import torch\n"
    )
    found = [(_module(node)[0], inside, typed) for node, inside, typed in _imports(tree)]
    assert found == [("typing", False, False), ("pandas", False, True), ("yaml", True, False), ("torch", True, False)]
