"""Prompts for the reasoning strategies: templates, strategies, exemplar selection, k selection."""

from .exemplars import exemplar_order, gold_answer, select_exemplars, target_spans
from .select_k import KSelection, select_k
from .strategies import (
    DEFAULT_K,
    K_CHOICES,
    STRATEGY_NAMES,
    Strategy,
    build_messages,
    build_user_prompt,
    components_of,
    get_strategy,
    strategy_from_config,
)
from .templates import TASK_LABELS, TASKS

__all__ = [
    "DEFAULT_K",
    "K_CHOICES",
    "KSelection",
    "STRATEGY_NAMES",
    "Strategy",
    "TASKS",
    "TASK_LABELS",
    "build_messages",
    "build_user_prompt",
    "components_of",
    "exemplar_order",
    "get_strategy",
    "gold_answer",
    "select_exemplars",
    "select_k",
    "strategy_from_config",
    "target_spans",
]
