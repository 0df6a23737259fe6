"""A typed run configuration turned into what a run needs: datasets, backend, system, identity, plan.

Everything here reads a :class:`~src.config.schema.RunConfig` (checked once by the entry point);
what can only be checked against the files on disk (a dataset, exemplars, a provider's model
ids, a backend that cannot be built) fails here, still before any request or MLflow run, as one
:class:`~src.core.errors.ConfigError` line.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from src import study
from src.backends import create_backend
from src.backends.cache import CachedBackend, ResponseCache
from src.backends.endpoint import API_BACKENDS, EndpointError, resolve_endpoint
from src.backends.options import OpenAIOptions
from src.backends.tokenizers import token_counter
from src.billing.forecast import forecast_configuration
from src.billing.meter import Meter
from src.config.schema import RunConfig
from src.core.errors import ConfigError
from src.data.schema import Record, read_records
from src.data.splits import subset_by_id
from src.data.text import words
from src.redact import redact_uris
from src.runs.prompted import PromptedSystem
from src.scoring.system import DatasetPlan
from src.tracking.evaluation import RunRecord
from src.tracking.keys import settings_digest
from src.tracking.store import data_version, git_commit

log = logging.getLogger(__name__)


def endpoint(config: RunConfig) -> tuple[str, dict[str, Any]]:
    """(model_id, backend options) the run's backend is built with: the model file's, redirected by
    ``provider`` when one is chosen (:func:`src.backends.endpoint.resolve_endpoint`); an API
    model's options checked as :class:`~src.backends.options.OpenAIOptions`."""
    model = {"name": config.model.name, "backend": config.model.backend, "model_id": config.model.model_id}
    model["options"] = config.model.options
    provider = None if config.provider is None else config.provider.as_dict()
    try:
        model_id, options = resolve_endpoint(model, provider)
    except EndpointError as error:
        raise ConfigError(str(error)) from None
    if config.model.backend in API_BACKENDS:
        options = OpenAIOptions.from_mapping(options).as_dict()
    return model_id, options


def planned_records(path: Path, limit: int | None, seed: int, max_words: int | None) -> list[Record]:
    """The records a run scores: those of at most ``max_words`` words, then the seeded ``limit`` subset."""
    records = read_records(path)
    if max_words is not None:
        kept = [r for r in records if len(words(r.text)) <= max_words]
        if not kept:
            raise ConfigError(f"max_input_words: no input of {path} has at most {max_words} words")
        if len(kept) < len(records):
            log.info("%s: %d of %d inputs have at most %d words", path, len(kept), len(records), max_words)
        records = kept
    return subset_by_id(records, limit, seed)


def planned_datasets(config: RunConfig) -> list[tuple[str, str, Path]]:
    """(task, dataset, file) for every task of ``tasks`` and dataset of the dimension."""
    if config.datasets is not None:
        unknown = [d for d in config.datasets if d not in study.DATASETS]
        if unknown:
            raise ConfigError(f"datasets: unknown {unknown}; the study's datasets are {list(study.DATASET_ORDER)}")
    plan = []
    for task in config.tasks:
        if task not in study.TASKS or task not in config.dimension.datasets:
            raise ConfigError(f"tasks: unknown task {task!r}; the study's tasks are {list(study.TASK_ORDER)}")
        for dataset in config.dimension.datasets[task]:
            if config.datasets is None or dataset in config.datasets:
                plan.append((task, dataset, config.dataset_file(task, dataset)))
    if not plan:
        raise ConfigError("nothing to run: the tasks and datasets overrides select no dataset")
    missing = [str(path) for _, _, path in plan if not path.exists()]
    if missing:
        raise ConfigError(
            "dataset file(s) not found: " + ", ".join(missing) + " (run `dvc pull` / `dvc repro` first, "
            "or restrict the run with tasks=[...] datasets=[...])"
        )
    return plan


def build_backend(config: RunConfig):
    """The model's backend wrapped in the shared response cache; an HTTP backend keeps its
    batch ids beside the cache (``<cache>/../batches``)."""

    model_id, options = endpoint(config)
    backend = create_backend(config.model.backend, model_id=model_id, **options)
    backend.batch_dir = config.paths.cache.parent / "batches"  # used by a backend that sends batches
    return CachedBackend(backend, ResponseCache(config.paths.cache))


def run_record(config: RunConfig, files: list[Path], weights: dict | None = None) -> RunRecord:
    """The MLflow identity of a prompted configuration: traceable to its config, data and, where
    the backend names them (``weights``: its cache identity), the exact model weights."""
    model, strategy, options = config.model, config.strategy, config.prompt
    weights = weights or {}
    model_id, backend_options = endpoint(config)
    api = model.backend in API_BACKENDS
    params: dict[str, Any] = {
        "model_id": model_id,  # the id the endpoint serves (provider= may map it)
        # the provider= that redirected an API model; None: the model file's own endpoint, or a local model
        "provider": config.provider.name if api and config.provider is not None else None,
        "backend": model.backend,
        "requantize": weights.get("requantize"),
        "gguf_sha256": weights.get("gguf_sha256"),  # the weights by content, and the engine that ran them
        "engine": weights.get("engine"),
        "family": model.family,
        "architecture": model.architecture,
        "params_total_b": model.params_total_b,
        "params_active_b": model.params_active_b,
        "k": strategy.k if strategy.inductive else 0,
        "inductive_plus": strategy.inductive_plus,
        "size_series": model.size_series,
        "dimension": config.dimension.name,
        "limit": config.limit,
        "max_input_words": config.max_input_words,
        "seed": config.seed,
        "warn_rate": config.warn_rate,  # the report flags this run's cells under its own threshold
        "temperature": config.generation.temperature,
        "answer_format": options.answer_format,
        "prompt_form": options.form,
        "constrained": options.constrained,
        "spans_from_input": options.spans_from_input,
        "stop_at_repeated_span": options.stop_at_repeated_span,
        "scoring_variants": ",".join(config.scoring.variants) or "paper",
        "git_commit": git_commit(),
        "data_version": data_version(files),
        "settings_digest": settings_digest(config.raw),  # every other setting: in the key (src/tracking/keys.py)
    }
    if api:  # where and how an API model was bought: the endpoint, the mode (its price), the pinned routing
        params["endpoint"] = redact_uris(str(backend_options.get("base_url") or ""))
        params["mode"] = backend_options["mode"]
        routing = backend_options.get("routing")
        params["routing"] = json.dumps(routing, sort_keys=True) if routing else None
    return RunRecord(config.run_name, "prompted", model.name, strategy.name, params, profile=config.profile)


def configured_system(
    config: RunConfig, files: list[tuple[str, str, Path]]
) -> tuple[PromptedSystem, list[DatasetPlan]]:
    """The cached backend (built, not started: nothing is loaded or sent), the system and the
    dataset plans of a checked configuration: what a run generates and what :mod:`src.plan` prices."""
    try:  # fails here, before any run is opened, e.g. on a missing API key or llama.cpp build
        backend = build_backend(config)
    except (ValueError, ImportError, RuntimeError, FileNotFoundError) as error:
        raise ConfigError(f"model {config.model.name}: {error}") from None
    plans = [
        DatasetPlan(task, dataset, path, planned_records(path, config.limit, config.seed, config.max_input_words))
        for task, dataset, path in files
    ]
    meter = Meter(config.model.price, token_counter(config.model))
    system = PromptedSystem(config, backend, meter)
    for task in dict.fromkeys(task for task, _, _ in files):  # fail before a run is opened, not inside it
        try:
            system.exemplars(task)
        except (ValueError, FileNotFoundError) as error:
            raise ConfigError(f"{task} exemplars: {error}") from None
    return system, plans


def plan_of(
    config: RunConfig, system: PromptedSystem, plans: list[DatasetPlan], seen: set[str] | None = None
) -> dict[str, Any]:
    """The configuration's plan (:func:`src.billing.forecast.forecast_configuration`) from the run's own
    requests; ``seen``: the request keys of the configurations planned before it in the same sweep."""
    batches = [(f"{plan.task}/{plan.dataset}", system.requests(plan)) for plan in plans]
    return forecast_configuration(
        config.run_name,
        system.backend,
        batches,
        config.model.price,
        system.meter.counter,
        seen,
        mode=system.backend.mode,
        concurrency=system.backend.max_concurrency,
        min_tokens_per_s=system.backend.min_tokens_per_s,
    )
