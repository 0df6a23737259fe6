"""A composed run configuration turned into what a run needs, every value checked first.

``check_config`` checks every override that could fail later (one line, exit 2, before a
backend or a run is opened); the rest build from it: the dataset plans, the cached backend,
the prompted system, the configuration's MLflow identity, its plan, its budget and meter.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from src import study
from src.backends.endpoint import API_BACKENDS
from src.billing.ledger import DEFAULT_LEDGER_FILE, DEFAULT_STALE_AFTER_S, Budget
from src.billing.meter import Meter
from src.billing.plan import plan_configuration
from src.billing.prices import model_price, token_counter
from src.cli import optional_int
from src.config.checks import (
    check_rate,
    check_seconds,
    check_seed,
    endpoint_of,
    name_list,
    positive_count,
)
from src.config.errors import ConfigError
from src.data.schema import Record, read_records
from src.data.splits import subset_by_id
from src.data.text import words
from src.prompts import PromptOptions, Strategy, strategy_from_config
from src.prompts.answer_schema import ANSWER_FORMATS, PROMPT_FORMS
from src.runs.prompted import PromptedSystem
from src.tracking.evaluation import DatasetPlan, RunRecord
from src.tracking.store import data_version, git_commit

log = logging.getLogger(__name__)

DEFAULT_LOCK_WAIT_S = 30.0


def dataset_file(cfg: DictConfig, task: str, dataset: str) -> Path:
    """Prepared sets under ``paths.prepared``, derived ones (adv, adv_p, voc) under ``paths.derived``."""
    return Path(study.dataset_path(str(cfg.paths.prepared), str(cfg.paths.derived), task, dataset))


def checked_count(cfg: DictConfig, key: str) -> int | None:
    """A non-negative integer or null option (``max_input_words``, ``generation.max_tokens_reasoning``),
    or a ConfigError naming ``key``."""
    try:
        return optional_int(OmegaConf.select(cfg, key))
    except ValueError as error:
        raise ConfigError(f"{key}: {error}") from None


def checked_limit(cfg: DictConfig) -> int | None:
    """``limit``: a positive integer or null (0 would score nothing)."""
    return positive_count(cfg, "limit")


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


def planned_datasets(cfg: DictConfig) -> list[tuple[str, str, Path]]:
    """(task, dataset, file) for every task of ``cfg.tasks`` and dataset of the dimension."""
    wanted = name_list(cfg, "datasets")
    tasks = name_list(cfg, "tasks") or []
    if wanted is not None:
        unknown = [d for d in wanted if d not in study.DATASETS]
        if unknown:
            raise ConfigError(f"datasets: unknown {unknown}; the study's datasets are {list(study.DATASET_ORDER)}")
    plan = []
    for task in tasks:
        if task not in study.TASKS or task not in cfg.dimension.datasets:
            raise ConfigError(f"tasks: unknown task {task!r}; the study's tasks are {list(study.TASK_ORDER)}")
        for dataset in cfg.dimension.datasets[task]:
            if wanted is None or dataset in wanted:
                plan.append((str(task), str(dataset), dataset_file(cfg, task, dataset)))
    if not plan:
        raise ConfigError("nothing to run: the tasks and datasets overrides select no dataset")
    missing = [str(path) for _, _, path in plan if not path.exists()]
    if missing:
        raise ConfigError(
            "dataset file(s) not found: " + ", ".join(missing) + " (run `dvc pull` / `dvc repro` first, "
            "or restrict the run with tasks=[...] datasets=[...])"
        )
    return plan


def generation_flag(cfg: DictConfig, key: str) -> bool:
    """``generation.<key>`` as a bool; anything but true/false (``=yes``, ``=1``) is a ConfigError,
    not silently true."""
    value = cfg.generation.get(key, False)
    if not isinstance(value, bool):
        raise ConfigError(f"generation.{key}: expected true or false, got {value!r}")
    return value


def prompt_options(cfg: DictConfig) -> PromptOptions:
    prompt = cfg.get("prompt") or {}
    options = PromptOptions(
        answer_format=str(prompt.get("answer_format", "compact")),
        form=str(prompt.get("form", "chat")),
        constrained=generation_flag(cfg, "constrained"),
        spans_from_input=generation_flag(cfg, "spans_from_input"),
        stop_at_repeated_span=generation_flag(cfg, "stop_at_repeated_span"),
    )
    if options.answer_format not in ANSWER_FORMATS:
        raise ConfigError(f"prompt.answer_format: {options.answer_format!r} is not one of {ANSWER_FORMATS}")
    if options.form not in PROMPT_FORMS:
        raise ConfigError(f"prompt.form: {options.form!r} is not one of {PROMPT_FORMS}")
    return options


def check_config(cfg: DictConfig) -> tuple[Strategy, PromptOptions, list[tuple[str, str, Path]]]:
    """Every override that could fail later, checked before a backend or a run is opened."""
    checked_limit(cfg)
    checked_count(cfg, "max_input_words")
    checked_count(cfg, "generation.max_tokens_reasoning")
    for key in ("seed", "generation.seed", "scoring.bootstrap_seed"):
        check_seed(OmegaConf.select(cfg, key), key)
    positive_count(cfg, "generation.max_tokens")
    positive_count(cfg, "generation.max_tokens_document")
    check_rate(cfg.get("warn_rate"), "warn_rate")
    check_seconds(OmegaConf.select(cfg, "mlflow.lock_wait_s", default=DEFAULT_LOCK_WAIT_S), "mlflow.lock_wait_s")
    try:
        strategy = strategy_from_config(cfg.strategy)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    temperature = cfg.generation.temperature
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
        raise ConfigError(f"generation.temperature: expected a number >= 0, got {temperature!r}")
    resamples = cfg.scoring.bootstrap_resamples
    if isinstance(resamples, bool) or not isinstance(resamples, int) or not 1 <= resamples <= 1_000_000:
        raise ConfigError(f"scoring.bootstrap_resamples: expected an integer in [1, 1000000], got {resamples!r}")
    variants = name_list(cfg, "scoring.variants") or []
    if variants:
        from src.scoring.variants import VARIANTS

        unknown = [v for v in variants if v not in VARIANTS]
        if unknown:
            raise ConfigError(f"scoring.variants: unknown {unknown}; choose from {list(VARIANTS)}")
    endpoint_of(cfg)  # the provider= redirection and the backend options: one line, exit 2
    model_price(cfg)  # a bad price block: one line, exit 2
    return strategy, prompt_options(cfg), planned_datasets(cfg)


def lock_wait_s(cfg: DictConfig) -> float:
    """How long a locked store is waited for: before the run, and to mark it FAILED mid-run."""
    return float(OmegaConf.select(cfg, "mlflow.lock_wait_s", default=DEFAULT_LOCK_WAIT_S))


def build_backend(cfg: DictConfig):
    """The model's backend wrapped in the shared response cache; an HTTP backend keeps its
    batch ids beside the cache (``<cache>/../batches``)."""
    from src.backends import create_backend
    from src.backends.cache import CachedBackend, ResponseCache

    model_id, options = endpoint_of(cfg)
    backend = create_backend(cfg.model.backend, model_id=model_id, **options)
    if hasattr(backend, "batch_dir"):
        backend.batch_dir = Path(str(cfg.paths.cache)).parent / "batches"
    return CachedBackend(backend, ResponseCache(cfg.paths.cache))


def run_record(
    cfg: DictConfig, strategy: Strategy, options: PromptOptions, files: list[Path], weights: dict | None = None
) -> RunRecord:
    """The MLflow identity of a prompted configuration: traceable to its config, data and, where
    the backend names them (``weights``: its cache identity), the exact model weights."""
    import json

    model = cfg.model
    weights = weights or {}
    model_id, backend_options = endpoint_of(cfg)
    api = model.backend in API_BACKENDS
    params: dict[str, Any] = {
        "model_id": model_id,  # the id the endpoint serves (provider= may map it)
        # the provider= that redirected an API model; None: the model file's own endpoint, or a local model
        "provider": OmegaConf.select(cfg, "provider.name") if api else None,
        "backend": model.backend,
        "requantize": weights.get("requantize"),
        "gguf_sha256": weights.get("gguf_sha256"),
        "family": model.family,
        "architecture": model.architecture,
        "params_total_b": model.params_total_b,
        "params_active_b": model.params_active_b,
        "k": strategy.k if strategy.inductive else 0,
        "inductive_plus": strategy.inductive_plus,
        "size_series": model.get("size_series"),
        "dimension": cfg.dimension.name,
        "limit": checked_limit(cfg),
        "max_input_words": checked_count(cfg, "max_input_words"),
        "seed": cfg.seed,
        "temperature": float(cfg.generation.temperature),
        "answer_format": options.answer_format,
        "prompt_form": options.form,
        "constrained": options.constrained,
        "spans_from_input": options.spans_from_input,
        "stop_at_repeated_span": options.stop_at_repeated_span,
        "scoring_variants": ",".join(cfg.scoring.get("variants") or []) or "paper",
        "git_commit": git_commit(),
        "data_version": data_version(files),
    }
    if api:  # how an API model was bought: the mode (its price) and the pinned routing
        params["mode"] = backend_options.get("mode") or "sync"
        routing = backend_options.get("routing")
        params["routing"] = json.dumps(routing, sort_keys=True) if routing else None
    return RunRecord(
        str(cfg.mlflow.run_name),
        "prompted",
        str(model.name),
        strategy.name,
        params,
        profile=OmegaConf.select(cfg, "profile"),
    )


def configured_system(
    cfg: DictConfig, strategy: Strategy, options: PromptOptions, files: list[tuple[str, str, Path]]
) -> tuple[PromptedSystem, list[DatasetPlan]]:
    """The cached backend (built, not started: nothing is loaded or sent), the system and the
    dataset plans of a checked configuration: what a run generates and what :mod:`src.plan` prices."""
    try:  # fails here, before any run is opened, e.g. on a missing API key or llama.cpp build
        backend = build_backend(cfg)
    except (ValueError, ImportError, RuntimeError, FileNotFoundError) as error:
        raise ConfigError(f"model {cfg.model.name}: {error}") from None
    limit, max_words = checked_limit(cfg), checked_count(cfg, "max_input_words")
    plans = [
        DatasetPlan(task, dataset, path, planned_records(path, limit, int(cfg.seed), max_words))
        for task, dataset, path in files
    ]
    price = model_price(cfg)
    system = PromptedSystem(cfg, backend, strategy, options, price, Meter(price, token_counter(cfg)))
    for task in dict.fromkeys(task for task, _, _ in files):  # fail before a run is opened, not inside it
        try:
            system.exemplars(task)
        except (ValueError, FileNotFoundError) as error:
            raise ConfigError(f"{task} exemplars: {error}") from None
    return system, plans


def plan_of(
    cfg: DictConfig, system: PromptedSystem, plans: list[DatasetPlan], seen: set[str] | None = None
) -> dict[str, Any]:
    """The configuration's plan (:func:`src.billing.plan.plan_configuration`) from the run's own
    requests; ``seen``: the request keys of the configurations planned before it in the same sweep."""
    batches = [(f"{plan.task}/{plan.dataset}", system.requests(plan)) for plan in plans]
    inner = getattr(system.backend, "backend", system.backend)
    return plan_configuration(
        str(cfg.mlflow.run_name),
        system.backend,
        batches,
        system.price,
        system.meter.counter,
        seen,
        mode=getattr(inner, "mode", "sync"),
        concurrency=getattr(inner, "max_concurrency", None),
        min_tokens_per_s=getattr(inner, "min_tokens_per_s", None),
    )


# ----- budget ---------------------------------------------------------------------------------------

DVC_NULLABLE = ("max_cost_usd", "max_requests", "ledger")


def sweep_budget(path: Path) -> dict[str, Any]:
    """The caps of a sweep profile (``sweep.max_cost_usd``, ``sweep.max_requests``) with the
    profile's name as the ledger: what the pipeline's ``run@`` stages are held to. Read at run
    time, not passed as stage params, so changing a cap never re-runs a finished stage."""
    import yaml

    try:
        sweep = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("sweep") or {}
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"budget.sweep_file: cannot read {path} ({error})") from None
    return {
        "max_cost_usd": sweep.get("max_cost_usd"),
        "max_requests": sweep.get("max_requests"),
        "ledger": str(sweep["profile"]) if sweep.get("profile") else None,
    }


def multirun_ledger() -> str | None:
    """The ledger a Hydra multirun's jobs share when none is named: one per sweep folder, so a
    cap holds for the whole sweep, whatever its launcher runs in parallel."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hydra_cfg = HydraConfig.get()
    except (ImportError, ValueError):  # not inside a Hydra job (the planner, a test)
        return None
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return None
    return f"multirun {Path(str(hydra_cfg.sweep.dir)).resolve()}"


def budget_from_config(cfg: DictConfig) -> Budget:
    block = dict(cfg.get("budget") or {})
    if block.get("sweep_file"):
        block.update(sweep_budget(Path(str(block["sweep_file"]))))
    # DVC writes a null sweep value into a stage command as None: the same as null here
    cost, requests, ledger = (None if block.get(k) == "None" else block.get(k) for k in DVC_NULLABLE)
    if cost is not None and (
        isinstance(cost, bool) or not isinstance(cost, (int, float)) or not math.isfinite(cost) or cost < 0
    ):
        raise ConfigError(f"budget.max_cost_usd: expected a number of USD >= 0 or null, got {cost!r}")
    if requests is not None and (isinstance(requests, bool) or not isinstance(requests, int) or requests < 0):
        raise ConfigError(f"budget.max_requests: expected an integer >= 0 or null, got {requests!r}")
    if ledger is not None and (not isinstance(ledger, str) or not ledger.strip()):
        raise ConfigError(f"budget.ledger: expected a name or null, got {ledger!r}")
    stale = block.get("stale_after_s", DEFAULT_STALE_AFTER_S)
    if isinstance(stale, bool) or not isinstance(stale, (int, float)) or stale <= 0:
        raise ConfigError(f"budget.stale_after_s: expected a number of seconds > 0, got {stale!r}")
    if ledger is None and (cost is not None or requests is not None):
        ledger = multirun_ledger()
    path = Path(str(block.get("ledger_file") or DEFAULT_LEDGER_FILE))
    return Budget(None if cost is None else float(cost), requests, ledger, path, float(stale))
