"""Reasoning strategies and the chat messages they produce for one input.

A strategy combines up to three reasoning types: inductive (few-shot exemplars),
deductive (an explicit span definition) and abductive (candidates, reasoning steps,
selection). Its name lists them with ``+`` (``I``, ``D``, ``A``, ``D+I``, ``A+I``,
``A+D``, ``A+D+I``); Hydra accepts these names as written (``strategy=A+D+I``).
The configs in ``conf/strategy/`` are read with ``strategy_from_config``; they hold only what
can vary (``name``, ``k``, the generation budgets): the reasoning types a strategy combines
and its "inductive+" group follow from its name.

Strategy names, letters and parts come from :mod:`src.study` (``STRATEGY_ORDER``,
``REASONING_PARTS``, ``strategy_parts``); the reasoning texts and their order in the prompt
from ``templates.REASONING_TEMPLATES``. A prompt is built for an answer format
(``compact`` | ``study``, see ``answer_schema``) and a prompt form: ``chat`` (system + user
messages) or ``completion`` (one plain text the model continues after an open answer cue,
sent with ``ChatRequest(completion=True)``). ``build_request_parts`` returns everything a
``ChatRequest`` needs from this side, the response schema included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from src.data.schema import Record
from src.study import REASONING_PARTS, STRATEGY_ORDER, strategy_parts

from . import templates
from .answer_schema import check_format, check_prompt_form, final_span_list, request_schema
from .exemplars import check_task, gold_answer

#: The study's strategy names, re-exported from :mod:`src.study` (the one definition).
STRATEGY_NAMES = STRATEGY_ORDER
K_CHOICES = (3, 5, 8)
DEFAULT_K = 5
_LETTERS = {part.letter: part.name for part in REASONING_PARTS}
#: The reasoning parts a Strategy holds as fields (they change more than the prompt text:
#: exemplars, the answer format, the generation budget). Parts that only add text are
#: read from the strategy's name (``Strategy.parts``).
_FIELDS = ("inductive", "deductive", "abductive")
#: Keys a ``conf/strategy`` file must set, and the optional ones.
_CONFIG_KEYS = ("name", "k", "max_tokens")
_OPTIONAL_CONFIG_KEYS = ("max_tokens_document",)


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

    def __post_init__(self) -> None:
        if self.name not in STRATEGY_NAMES:
            raise ValueError(f"unknown strategy {self.name!r} (expected one of {', '.join(STRATEGY_NAMES)})")
        expected = {key: components_of(self.name).get(key, False) for key in _FIELDS}
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

    @property
    def inductive_plus(self) -> bool:
        """The study's "inductive+" group: every strategy that shows exemplars."""
        return self.inductive

    @property
    def parts(self) -> dict[str, bool]:
        """Every reasoning part of ``src.study.REASONING_PARTS``: whether this strategy uses it."""
        return components_of(self.name)


def components_of(name: str) -> dict[str, bool]:
    """The reasoning types a strategy name stands for, e.g. ``A+D`` -> abductive and deductive.

    The letters and their parts are ``src.study.REASONING_PARTS`` (``strategy_parts``).
    """
    try:
        return strategy_parts(name)
    except ValueError:
        letters = ", ".join(_LETTERS)
        raise ValueError(f"strategy name {name!r} must join distinct letters from {letters} with '+'") from None


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
        k=0 if k is None else k,
        max_tokens=1024 if abductive else 512,
        max_tokens_document=2048 if abductive else 1024,
        **{key: components[key] for key in _FIELDS},
    )


def strategy_from_config(cfg: Mapping, where: str = "strategy config") -> Strategy:
    """Validate a ``conf/strategy/*.yaml`` node (a mapping) into a Strategy.

    The reasoning types come from the name (:func:`components_of`); a key the file may not set
    (such as ``components``, which the name already fixes) is an error, not silently ignored.
    """
    missing = [key for key in _CONFIG_KEYS if key not in cfg]
    if missing:
        raise ValueError(f"{where}: missing key(s) {', '.join(missing)}")
    unknown = [str(key) for key in cfg if key not in _CONFIG_KEYS + _OPTIONAL_CONFIG_KEYS]
    if unknown:
        raise ValueError(
            f"{where}: unknown key(s) {', '.join(unknown)} (a strategy file sets only "
            f"{', '.join(_CONFIG_KEYS + _OPTIONAL_CONFIG_KEYS)}; its reasoning types follow from its name)"
        )
    name = str(cfg["name"])
    return Strategy(
        name=name,
        k=cfg["k"],
        max_tokens=cfg["max_tokens"],
        max_tokens_document=cfg.get("max_tokens_document", cfg["max_tokens"]),
        **{key: components_of(name)[key] for key in _FIELDS},
    )


def _check_call(strategy: Strategy, task: str, text: str, exemplars: Sequence[Record]) -> None:
    check_task(task)
    if not isinstance(text, str) or not text.strip():
        raise ValueError("the input text is empty")
    if strategy.inductive and not exemplars:
        raise ValueError(f"strategy {strategy.name!r} is inductive but no exemplars were given")
    if not strategy.inductive and exemplars:
        raise ValueError(f"strategy {strategy.name!r} takes no exemplars, got {len(exemplars)}")


def _reasoning_parts(strategy: Strategy, task: str) -> list[str]:
    """The reasoning-type definitions the strategy uses, in ``templates.REASONING_TEMPLATES`` order."""
    parts = strategy.parts
    return [templates.reasoning_text(part, task) for part in templates.REASONING_TEMPLATES if parts.get(part)]


def build_user_prompt(
    strategy: Strategy, task: str, text: str, exemplars: Sequence[Record] = (), answer_format: str = "compact"
) -> str:
    """The user message: task, reasoning type(s), output format, exemplars, then the input."""
    check_format(answer_format)
    _check_call(strategy, task, text, exemplars)
    parts = [templates.TASK_DEFINITIONS[task]]
    parts += _reasoning_parts(strategy, task)
    parts.append(templates.OUTPUT_FORMAT_SETS[answer_format][(task, strategy.abductive)])
    if strategy.inductive:
        blocks = [
            templates.EXAMPLE_BLOCK.format(
                number=number, text=record.text, answer=gold_answer(record, task, strategy.abductive, answer_format)
            )
            for number, record in enumerate(exemplars, start=1)
        ]
        parts.append(templates.EXAMPLES_HEADER + "\n" + "\n\n".join(blocks))
    parts.append(templates.INPUT_HEADER + text)
    return "\n\n".join(parts)


def completion_answer(record: Record, task: str, abductive: bool, answer_format: str = "compact") -> str:
    """A record's gold answer as the completion form writes it after ``Text: ...``: the answer
    cue (``Time expressions:``, ``Events:``, or for comp and abductive strategies a ``(JSON):``
    cue) followed by the format's JSON answer."""
    return templates.completion_cue(task, abductive) + " " + gold_answer(record, task, abductive, answer_format)


def build_completion_prompt(
    strategy: Strategy, task: str, text: str, exemplars: Sequence[Record] = (), answer_format: str = "compact"
) -> str:
    """The completion-form prompt: one plain text the model continues after the answer cue.

    The system role and the definitions as plain paragraphs, the output format, exemplars
    as ``Text: ...`` / answer-line pairs, then ``Text: <input>`` and the open cue line
    (``Time expressions:``; ``Events:``; for comp and abductive strategies a ``(JSON):`` cue).
    """
    check_format(answer_format)
    _check_call(strategy, task, text, exemplars)
    parts = [templates.SYSTEM_ROLE, templates.TASK_DEFINITIONS[task]]
    parts += _reasoning_parts(strategy, task)
    parts.append(templates.completion_output_format(task, strategy.abductive, answer_format))
    if strategy.inductive:
        pairs = [
            "Text: " + record.text + "\n" + completion_answer(record, task, strategy.abductive, answer_format)
            for record in exemplars
        ]
        parts.append(templates.EXAMPLES_HEADER + "\n" + "\n\n".join(pairs))
    parts.append(templates.INPUT_HEADER + text + "\n" + templates.completion_cue(task, strategy.abductive))
    return "\n\n".join(parts)


def _as_strategy(strategy: Strategy | str, exemplars: Sequence[Record]) -> Strategy:
    if isinstance(strategy, str):
        return get_strategy(strategy, k=len(exemplars) or None)
    return strategy


def build_messages(
    strategy: Strategy | str,
    task: str,
    text: str,
    exemplars: Sequence[Record] = (),
    answer_format: str = "compact",
    prompt_form: str = "chat",
) -> tuple[tuple[str, str], ...]:
    """The messages for one input, in ``ChatRequest.messages`` form.

    ``chat``: (system, user) messages. ``completion``: one ("user", text) message, to be sent
    with ``ChatRequest(completion=True)``. Deterministic: the same arguments give the same
    messages, so the response cache can key on them. The input text (plus, in the completion
    form, the open answer cue) is the end of the user message.
    """
    check_prompt_form(prompt_form)
    strategy = _as_strategy(strategy, exemplars)
    if prompt_form == "completion":
        return (("user", build_completion_prompt(strategy, task, text, exemplars, answer_format)),)
    return (
        ("system", templates.SYSTEM_ROLE),
        ("user", build_user_prompt(strategy, task, text, exemplars, answer_format)),
    )


@dataclass(frozen=True)
class RequestParts:
    """What ``ChatRequest`` needs from the prompt side for one input.

    ``ChatRequest(messages=p.messages, completion=p.completion, response_schema=p.response_schema,
    stop_at_repeat=p.stop_at_repeat, ...)``
    """

    messages: tuple[tuple[str, str], ...]
    completion: bool
    response_schema: str | None
    stop_at_repeat: str | None = None


@dataclass(frozen=True)
class PromptOptions:
    """How prompts are rendered and answers constrained (all part of the cache key).

    ``answer_format``: compact or study; ``form``: chat or completion; ``constrained``: send the
    answer's JSON schema; ``spans_from_input``: every span of a constrained answer must be a
    word n-gram of the input; ``stop_at_repeated_span``: the answer ends at the first span of
    its final list that repeats an earlier one (``ChatRequest.stop_at_repeat``).
    """

    answer_format: str = "compact"
    form: str = "chat"
    constrained: bool = False
    spans_from_input: bool = False
    stop_at_repeated_span: bool = False


def build_request_parts(
    strategy: Strategy | str,
    task: str,
    text: str,
    exemplars: Sequence[Record] = (),
    options: PromptOptions = PromptOptions(),
) -> RequestParts:
    """Messages, completion flag, response schema (see ``request_schema``) and repeat stop
    (``final_span_list``) for one input."""
    strategy = _as_strategy(strategy, exemplars)
    messages = build_messages(strategy, task, text, exemplars, options.answer_format, options.form)
    schema = request_schema(
        task,
        strategy,
        options.answer_format,
        options.constrained,
        options.form,
        input_text=text if options.spans_from_input else None,
    )
    stop = final_span_list(task, strategy.abductive, options.answer_format) if options.stop_at_repeated_span else None
    return RequestParts(messages, options.form == "completion", schema, stop)
