"""The run's configuration, typed: what ``python -m src.run`` and the planner build from Hydra once.

``conf/`` holds every value and default a researcher sets (``conf/config.yaml`` and its groups;
the OpenAI backend's option defaults live with :class:`~src.backends.options.OpenAIOptions`).
The entry point composes it with Hydra and hands the result to :meth:`RunConfig.from_hydra`,
which checks every value (one line naming the key, :class:`~src.core.errors.ConfigError`,
exit code 2 before any request) and returns these frozen dataclasses; nothing below the entry
point reads Hydra's composition. The dataclasses carry no defaults of their own (``conf/`` is where
each lives), a key they do not know is a typo reported as one, and ``tests/test_config_schema.py``
checks the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from src import study
from src.billing.ledger import Budget
from src.billing.prices import Price, price_from_block
from src.config.budget import budget_from_mapping
from src.core import values
from src.core.errors import ConfigError
from src.prompts import PromptOptions, Strategy, strategy_from_config
from src.prompts.answer_schema import ANSWER_FORMATS, PROMPT_FORMS
from src.scoring.variants import VARIANTS

#: Groups of ``conf/config.yaml`` whose keys are checked here, and the top-level run keys.
RUN_KEYS = ("seed", "tasks", "datasets", "limit", "max_input_words", "profile", "evidence", "summary", "warn_rate")


def _keys(data: dict[str, Any], where: str, known: tuple[str, ...]) -> None:
    """A key the schema does not know is a typo: one line naming it."""
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: no such setting (the settings: {', '.join(known)})")


def _names(cls) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


@dataclass(frozen=True)
class Paths:
    prepared: Path
    derived: Path
    cache: Path

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> Paths:
        _keys(data, "paths", _names(cls))
        return cls(*(Path(str(values.text(data.get(name), f"paths.{name}", nullable=False))) for name in _names(cls)))


@dataclass(frozen=True)
class Generation:
    """How answers are decoded (``generation.*``)."""

    temperature: float
    max_tokens: int | None
    max_tokens_document: int | None
    max_tokens_reasoning: int | None
    seed: int
    constrained: bool
    spans_from_input: bool
    stop_at_repeated_span: bool

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> Generation:
        _keys(data, "generation", _names(cls))
        temperature = data.get("temperature")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
            raise ConfigError(f"generation.temperature: expected a number >= 0, got {temperature!r}")
        return cls(
            float(temperature),
            values.count(data.get("max_tokens"), "generation.max_tokens", positive=True),
            values.count(data.get("max_tokens_document"), "generation.max_tokens_document", positive=True),
            values.count(data.get("max_tokens_reasoning"), "generation.max_tokens_reasoning"),
            values.seed(data.get("seed"), "generation.seed"),
            *(values.flag(data.get(name, False), f"generation.{name}") for name in _names(cls)[5:]),
        )


@dataclass(frozen=True)
class Scoring:
    """How outputs are scored (``scoring.*``)."""

    lowercase: bool
    variants: tuple[str, ...]
    bootstrap_resamples: int
    bootstrap_seed: int

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> Scoring:
        _keys(data, "scoring", _names(cls))
        variants = tuple(values.names(data.get("variants"), "scoring.variants") or ())
        if variants:
            unknown = [v for v in variants if v not in VARIANTS]
            if unknown:
                raise ConfigError(f"scoring.variants: unknown {unknown}; choose from {list(VARIANTS)}")
        resamples = data.get("bootstrap_resamples")
        if isinstance(resamples, bool) or not isinstance(resamples, int) or not 1 <= resamples <= values.MAX_RESAMPLES:
            raise ConfigError(
                f"scoring.bootstrap_resamples: expected an integer in [1, {values.MAX_RESAMPLES}], got {resamples!r}"
            )
        return cls(
            values.flag(data.get("lowercase"), "scoring.lowercase"),
            variants,
            resamples,
            values.seed(data.get("bootstrap_seed"), "scoring.bootstrap_seed"),
        )


@dataclass(frozen=True)
class Tracking:
    """Where and how the run is logged (``mlflow.*``)."""

    experiment: str
    tracking_uri: str | None
    lock_wait_s: float
    run_name: str

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> Tracking:
        _keys(data, "mlflow", _names(cls))
        return cls(
            str(values.text(data.get("experiment"), "mlflow.experiment", nullable=False)),
            values.text(data.get("tracking_uri"), "mlflow.tracking_uri"),
            values.seconds(data.get("lock_wait_s"), "mlflow.lock_wait_s"),
            str(values.text(data.get("run_name"), "mlflow.run_name", nullable=False)),
        )


@dataclass(frozen=True)
class Model:
    """A model file (``conf/model/*.yaml``): what it is, how it is served and what it costs.

    ``options`` stay a mapping here: the backend types them (the OpenAI backend's
    :class:`~src.backends.options.OpenAIOptions`; a local engine's keywords).
    """

    name: str
    family: str | None
    architecture: str | None
    params_total_b: float | None
    params_active_b: float | None
    size_series: str | None
    backend: str
    model_id: str
    options: dict[str, Any]
    price: Price | None
    tokenizer: str | None

    KEYS = ("prompt_form", "constrained", "spans_from_input", "stop_at_repeated_span")  # read by conf/config.yaml

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> Model:
        _keys(data, "model", (*_names(cls), *cls.KEYS))
        block = data.get("price")
        if block is None:
            price = None if data.get("backend") == "openai" else Price(0.0, 0.0, None, "local model")
        else:
            price = price_from_block(block)
        sizes = []
        for name in ("params_total_b", "params_active_b"):
            value = data.get(name)
            sizes.append(None if value is None else values.number(value, f"model.{name}", 0))
        return cls(
            str(values.text(data.get("name"), "model.name", nullable=False)),
            values.text(data.get("family"), "model.family"),
            values.text(data.get("architecture"), "model.architecture"),
            *sizes,
            values.text(data.get("size_series"), "model.size_series"),
            str(values.text(data.get("backend"), "model.backend", nullable=False)),
            str(values.text(data.get("model_id"), "model.model_id", nullable=False)),
            values.mapping(data.get("options"), "model.options"),
            price,
            values.text(data.get("tokenizer"), "model.tokenizer"),
        )


@dataclass(frozen=True)
class Provider:
    """Where API models are sent instead of their model files' endpoint (``conf/provider/*.yaml``)."""

    name: str
    base_url: str
    api_key_env: str | None
    model_ids: dict[str, str] | None
    served_model: str | None
    options: dict[str, Any]
    routing: dict[str, Any] | None

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> Provider:
        _keys(data, "provider", _names(cls))
        return cls(**{name: data.get(name) for name in _names(cls)})

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _names(type(self))}


@dataclass(frozen=True)
class Dimension:
    name: str
    datasets: dict[str, list[str]]

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> Dimension:
        _keys(data, "dimension", _names(cls))
        return cls(
            str(data.get("name")), {str(t): [str(d) for d in ds] for t, ds in (data.get("datasets") or {}).items()}
        )


@dataclass(frozen=True)
class RunConfig:
    """One prompted configuration, every value checked."""

    seed: int
    tasks: tuple[str, ...]
    datasets: tuple[str, ...] | None
    limit: int | None
    max_input_words: int | None
    profile: str | None
    evidence: str | None
    summary: str | None
    warn_rate: float
    budget: Budget
    paths: Paths
    prompt: PromptOptions
    generation: Generation
    scoring: Scoring
    mlflow: Tracking
    model: Model
    strategy: Strategy
    dimension: Dimension
    provider: Provider | None
    raw: dict[str, Any]  # the resolved composition, as logged (config/resolved.json)

    @classmethod
    def from_hydra(cls, cfg: Any) -> RunConfig:
        """Check and type Hydra's composition (its own ``hydra`` node dropped)."""

        data = OmegaConf.to_container(cfg, resolve=True)
        data.pop("hydra", None)
        return cls.from_mapping(data)

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> RunConfig:
        groups = ("budget", "paths", "prompt", "generation", "scoring", "mlflow", "model", "strategy", "dimension")
        _keys(data, "config", (*RUN_KEYS, *groups, "provider", "k_selection_output"))
        seed = values.seed(data.get("seed"), "seed")  # first: other seeds interpolate it
        generation = Generation.from_mapping(dict(data.get("generation") or {}))
        try:
            strategy = strategy_from_config(data.get("strategy") or {})
        except ValueError as error:
            raise ConfigError(str(error)) from None
        return cls(
            seed=seed,
            tasks=tuple(values.names(data.get("tasks"), "tasks") or ()),
            datasets=_optional_tuple(values.names(data.get("datasets"), "datasets")),
            limit=values.count(data.get("limit"), "limit", positive=True),
            max_input_words=values.count(data.get("max_input_words"), "max_input_words"),
            profile=values.text(data.get("profile"), "profile"),
            evidence=values.text(data.get("evidence"), "evidence"),
            summary=values.text(data.get("summary"), "summary"),
            warn_rate=values.rate(data.get("warn_rate"), "warn_rate"),
            budget=budget_from_mapping(dict(data.get("budget") or {})),
            paths=Paths.from_mapping(dict(data.get("paths") or {})),
            prompt=prompt_options(dict(data.get("prompt") or {}), generation),
            generation=generation,
            scoring=Scoring.from_mapping(dict(data.get("scoring") or {})),
            mlflow=Tracking.from_mapping(dict(data.get("mlflow") or {})),
            model=Model.from_mapping(dict(data.get("model") or {})),
            strategy=strategy,
            dimension=Dimension.from_mapping(dict(data.get("dimension") or {})),
            provider=None if data.get("provider") is None else Provider.from_mapping(dict(data["provider"])),
            raw=data,
        )

    @property
    def run_name(self) -> str:
        return self.mlflow.run_name

    def dataset_file(self, task: str, dataset: str) -> Path:
        """Prepared sets under ``paths.prepared``, derived ones (adv, adv_p, voc) under ``paths.derived``."""
        return Path(study.dataset_path(str(self.paths.prepared), str(self.paths.derived), task, dataset))


def _optional_tuple(items: list[str] | None) -> tuple[str, ...] | None:
    return None if items is None else tuple(items)


def prompt_options(data: dict[str, Any], generation: Generation) -> PromptOptions:
    """``prompt.*`` with the decoding switches of ``generation.*`` the prompt depends on."""
    _keys(data, "prompt", ("answer_format", "form"))
    options = PromptOptions(
        answer_format=str(data.get("answer_format")),
        form=str(data.get("form")),
        constrained=generation.constrained,
        spans_from_input=generation.spans_from_input,
        stop_at_repeated_span=generation.stop_at_repeated_span,
    )
    if options.answer_format not in ANSWER_FORMATS:
        raise ConfigError(f"prompt.answer_format: {options.answer_format!r} is not one of {ANSWER_FORMATS}")
    if options.form not in PROMPT_FORMS:
        raise ConfigError(f"prompt.form: {options.form!r} is not one of {PROMPT_FORMS}")
    return options
