"""Reasoning strategies and the chat messages they produce for one input.

A strategy combines up to three reasoning types: inductive (few-shot exemplars),
deductive (an explicit span definition) and abductive (candidates, reasoning steps,
selection). Its name lists them with ``+`` (``I``, ``D``, ``A``, ``D+I``, ``A+I``,
``A+D``, ``A+D+I``); Hydra accepts these names as written (``strategy=A+D+I``).
The configs in ``conf/strategy/`` are read with ``strategy_from_config``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from src.data.schema import Record

from . import templates
from .exemplars import check_task, gold_answer

STRATEGY_NAMES = ("I", "D", "A", "D+I", "A+I", "A+D", "A+D+I")
K_CHOICES = (3, 5, 8)
DEFAULT_K = 5
_LETTERS = {"I": "inductive", "D": "deductive", "A": "abductive"}
_CONFIG_KEYS = ("name", "display_name", "components", "k", "inductive_plus", "max_tokens")


@dataclass(frozen=True)
class Strategy:
    """One reasoning strategy; ``k`` is the number of exemplars (0 unless inductive)."""

    name: str
    inductive: bool
    deductive: bool
    abductive: bool
    k: int = 0
    max_tokens: int = 512
    max_tokens_document: int = 1024
    display_name: str = ""

    def __post_init__(self) -> None:
        if self.name not in STRATEGY_NAMES:
            raise ValueError(f"unknown strategy {self.name!r} (expected one of {', '.join(STRATEGY_NAMES)})")
        expected = components_of(self.name)
        actual = {"inductive": self.inductive, "deductive": self.deductive, "abductive": self.abductive}
        if actual != expected:
            raise ValueError(f"strategy {self.name!r} needs components {expected}, got {actual}")
        if isinstance(self.k, bool) or not isinstance(self.k, int):
            raise ValueError(f"strategy {self.name!r}: k must be an integer, got {self.k!r}")
        if self.inductive and self.k < 1:
            raise ValueError(f"strategy {self.name!r} is inductive and needs k >= 1, got {self.k}")
        if not self.inductive and self.k != 0:
            raise ValueError(f"strategy {self.name!r} uses no exemplars; k must be 0, got {self.k}")
        for key in ("max_tokens", "max_tokens_document"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"strategy {self.name!r}: {key} must be a positive integer, got {value!r}")
        if not self.display_name:
            object.__setattr__(self, "display_name", self.name)

    @property
    def inductive_plus(self) -> bool:
        """The study's "inductive+" group: every strategy that shows exemplars."""
        return self.inductive


def components_of(name: str) -> dict[str, bool]:
    """The reasoning types a strategy name stands for, e.g. ``A+D`` -> abductive and deductive."""
    letters = name.split("+")
    if not letters or any(letter not in _LETTERS for letter in letters) or len(set(letters)) != len(letters):
        raise ValueError(f"strategy name {name!r} must join distinct letters from I, D, A with '+'")
    return {component: letter in letters for letter, component in _LETTERS.items()}


def get_strategy(name: str, k: int | None = None) -> Strategy:
    """A strategy from its name alone; inductive ones get ``k`` (default ``DEFAULT_K``)."""
    components = components_of(name)
    abductive = components["abductive"]
    if components["inductive"]:
        k = DEFAULT_K if k is None else k
    elif k not in (None, 0):
        raise ValueError(f"strategy {name!r} takes no exemplars; got k={k}")
    return Strategy(
        name=name,
        k=k or 0,
        max_tokens=1024 if abductive else 512,
        max_tokens_document=2048 if abductive else 1024,
        **components,
    )


def strategy_from_config(cfg: Mapping, where: str = "strategy config") -> Strategy:
    """Validate a ``conf/strategy/*.yaml`` node (a mapping or DictConfig) into a Strategy."""
    missing = [key for key in _CONFIG_KEYS if key not in cfg]
    if missing:
        raise ValueError(f"{where}: missing key(s) {', '.join(missing)}")
    components = cfg["components"]
    for key in _LETTERS.values():
        if not isinstance(components.get(key), bool):
            raise ValueError(f"{where}: components.{key} must be true or false")
    strategy = Strategy(
        name=str(cfg["name"]),
        display_name=str(cfg["display_name"]),
        k=cfg["k"],
        max_tokens=cfg["max_tokens"],
        max_tokens_document=cfg.get("max_tokens_document", cfg["max_tokens"]),
        **{key: bool(components[key]) for key in _LETTERS.values()},
    )
    flag = cfg["inductive_plus"]
    if not isinstance(flag, bool) or flag != strategy.inductive_plus:
        raise ValueError(f"{where}: inductive_plus must be {strategy.inductive_plus} for {strategy.name!r}")
    return strategy


def build_user_prompt(strategy: Strategy, task: str, text: str, exemplars: Sequence[Record] = ()) -> str:
    """The user message: task, reasoning type(s), output format, exemplars, then the input."""
    check_task(task)
    if not isinstance(text, str) or not text.strip():
        raise ValueError("the input text is empty")
    if strategy.inductive and not exemplars:
        raise ValueError(f"strategy {strategy.name!r} is inductive but no exemplars were given")
    if not strategy.inductive and exemplars:
        raise ValueError(f"strategy {strategy.name!r} takes no exemplars, got {len(exemplars)}")

    targets = templates.TARGET_NOUN[task]
    parts = [templates.TASK_DEFINITIONS[task]]
    if strategy.deductive:
        parts.append(templates.DEDUCTIVE[task])
    if strategy.abductive:
        parts.append(templates.ABDUCTIVE.format(targets=targets))
    if strategy.inductive:
        parts.append(templates.INDUCTIVE.format(targets=targets))
    parts.append(templates.OUTPUT_FORMATS[(task, strategy.abductive)])
    if strategy.inductive:
        blocks = [
            templates.EXAMPLE_BLOCK.format(
                number=number, text=record.text, answer=gold_answer(record, task, strategy.abductive)
            )
            for number, record in enumerate(exemplars, start=1)
        ]
        parts.append(templates.EXAMPLES_HEADER + "\n" + "\n\n".join(blocks))
    parts.append(templates.INPUT_HEADER + text)
    return "\n\n".join(parts)


def build_messages(
    strategy: Strategy | str, task: str, text: str, exemplars: Sequence[Record] = ()
) -> tuple[tuple[str, str], ...]:
    """The (system, user) messages for one input, in ``ChatRequest.messages`` form.

    Deterministic: the same strategy, task, text and exemplars give the same messages,
    so the response cache can key on them. The input text is the end of the user message.
    """
    if isinstance(strategy, str):
        strategy = get_strategy(strategy, k=len(exemplars) or None)
    return (
        ("system", templates.SYSTEM_ROLE),
        ("user", build_user_prompt(strategy, task, text, exemplars)),
    )
