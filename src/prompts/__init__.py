"""Prompts for the reasoning strategies: templates, strategies, exemplar selection, k selection,
answer formats and their schemas."""

from .answer_schema import (
    ANSWER_FORMATS,
    PROMPT_FORMS,
    answer_schema,
    request_schema,
    schema_text,
)
from .exemplars import (
    exemplar_order,
    gold_answer,
    gold_value,
    select_exemplars,
    target_spans,
)
from .select_k import KSelection, select_k
from .strategies import (
    DEFAULT_K,
    K_CHOICES,
    STRATEGY_NAMES,
    PromptOptions,
    RequestParts,
    Strategy,
    build_completion_prompt,
    build_messages,
    build_request_parts,
    build_user_prompt,
    components_of,
    get_strategy,
    strategy_from_config,
)

__all__ = [
    "ANSWER_FORMATS",
    "DEFAULT_K",
    "K_CHOICES",
    "PROMPT_FORMS",
    "STRATEGY_NAMES",
    "KSelection",
    "PromptOptions",
    "RequestParts",
    "Strategy",
    "answer_schema",
    "build_completion_prompt",
    "build_messages",
    "build_request_parts",
    "build_user_prompt",
    "components_of",
    "exemplar_order",
    "get_strategy",
    "gold_answer",
    "gold_value",
    "request_schema",
    "schema_text",
    "select_exemplars",
    "select_k",
    "strategy_from_config",
    "target_spans",
]
