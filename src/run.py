"""Run one configuration (model x reasoning strategy) over its tasks and datasets.

``python -m src.run model=qwen3_moe strategy=I`` composes ``conf/`` with Hydra, checks
every override before anything starts, generates through the response cache, parses and
hands the outputs to the one evaluation runner (:mod:`src.scoring.runner`), which logs
the MLflow run ``{model}-{strategy}``. Requests that still fail after their retries are
listed with their real causes and the process exits 1; a re-run sends only what is
missing. A bad override, value or tracking store is one line on stderr and exit code 2, before
any request (:mod:`src.run_checks`, :mod:`src.store_health`), and so is a plan that would pass
``budget.max_cost_usd`` or ``budget.max_requests`` (:mod:`src.pricing`; the plan is logged as
``plan.json``, ``python -m src.plan`` prints it). Ctrl-C or SIGTERM ends the run
FAILED with one line (``interrupted: N of M answers cached; ...``) and exit code 130 / 143; a
store that fails mid-run marks the run FAILED after a bounded wait, exit code 1. The run ends
with its verdict: F1 per dataset and a warning naming the datasets whose answers are not to
trust (:mod:`src.verdict`).
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from src import study
from src.backends.endpoint import API_BACKENDS
from src.cli import one_line, optional_int
from src.data.schema import Record, read_records
from src.data.splits import subset_by_id
from src.data.text import words
from src.params import register_resolver
from src.pricing import (
    Price,
    attempts_of,
    budget_from_config,
    budget_problem,
    model_price,
    plan_configuration,
    record_spend,
    request_key,
    result_cost,
    spent,
    token_counter,
    usd,
)
from src.prompts import PromptOptions, Strategy, build_request_parts, select_exemplars, strategy_from_config
from src.prompts.answer_schema import ANSWER_FORMATS, PROMPT_FORMS
from src.run_checks import (
    ConfigError,
    check_rate,
    check_seconds,
    check_seed,
    endpoint_of,
    name_list,
    positive_count,
    unknown_choice_error,
)
from src.scoring.evaluate import InstanceOutput
from src.scoring.runner import (
    DatasetPlan,
    RunRecord,
    ScoringOptions,
    SystemOutput,
    evaluate_configuration,
    report_failures,
    write_summary,
)
from src.store_health import (
    StoreUnusable,
    check_store,
    close_own_runs,
    fault_summary,
    is_store_fault,
    quiet_store_tracebacks,
    shown,
)
from src.tracking import (
    StoreError,
    config_secrets,
    data_version,
    git_commit,
    log_json_artifact,
    redact,
    tracking_uri as resolve_tracking_uri,
)
from src.verdict import run_verdict

log = logging.getLogger("src.run")
register_resolver()

TRAIN_SPLIT = "train"
#: A dataset's usage (usage.json, ``<task>.<dataset>.usage.*`` metrics): tokens and cost of new
#: requests apart from those of cached answers (``cached_*``); see :meth:`PromptedSystem.usage`.
USAGE_FIELDS = (
    "requests",
    "sent",
    "cached",
    "duplicates",
    "failed",
    "attempts",
    "retried",
    "prompt_tokens",
    "completion_tokens",
    "cost",
    "cached_prompt_tokens",
    "cached_completion_tokens",
    "cached_cost",
    "latency_s",
)
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130, what a shell reports for Ctrl-C
# 143: SIGTERM stops the run exactly as Ctrl-C does (same line, run FAILED, answers cached); only
# the code differs, the one shells, `timeout`, systemd and CI report for a terminated process, so
# whoever stopped the run (a scheduler, not a person) can tell from the exit code
EXIT_TERMINATED = 128 + signal.SIGTERM
DEFAULT_LOCK_WAIT_S = 30.0


class SignalState:
    """Whether the stop came from SIGTERM (delivered as Ctrl-C, see :func:`forward_sigterm`)."""

    terminated = False


def stop_code() -> int:
    return EXIT_TERMINATED if SignalState.terminated else EXIT_INTERRUPTED


class StoreFailedMidRun(RuntimeError):
    """The tracking store failed while the run was open; the message is one line, exit code 1."""


class Interrupted(RuntimeError):
    """Ctrl-C or SIGTERM during the run: the one line to print and the exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


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
    return strategy, prompt_options(cfg), planned_datasets(cfg)


def check_tracking_store(cfg: DictConfig) -> str:
    """The tracking URI, once the store is known to be usable (not corrupt, not locked)."""
    uri = resolve_tracking_uri(cfg.mlflow.tracking_uri)
    try:
        check_store(uri, lock_wait_s(cfg))
    except StoreUnusable as error:
        raise StoreError(str(error)) from None
    return uri


def lock_wait_s(cfg: DictConfig) -> float:
    """How long a locked store is waited for: before the run, and to mark it FAILED mid-run."""
    return float(OmegaConf.select(cfg, "mlflow.lock_wait_s", default=DEFAULT_LOCK_WAIT_S))


def build_backend(cfg: DictConfig):
    """The model's backend wrapped in the shared response cache."""
    from src.backends import create_backend
    from src.backends.cache import CachedBackend, ResponseCache

    model_id, options = endpoint_of(cfg)
    backend = create_backend(cfg.model.backend, model_id=model_id, **options)
    return CachedBackend(backend, ResponseCache(cfg.paths.cache))


def select_exemplars_for(cfg: DictConfig, strategy: Strategy, task: str) -> list[Record]:
    """The inductive exemplars of a task, drawn from its train split with the run's seed."""
    if not strategy.inductive:
        return []
    train = read_records(Path(cfg.paths.prepared) / task / f"{TRAIN_SPLIT}.jsonl")
    return select_exemplars(train, strategy.k, int(cfg.seed), task)


def generation_budget(cfg: DictConfig, strategy: Strategy, dataset: str) -> int:
    """Max new tokens: the explicit override, else the strategy's budget (both larger for
    documents), plus ``generation.max_tokens_reasoning`` for an abductive answer's steps."""
    reasoning = (optional_int(cfg.generation.get("max_tokens_reasoning")) or 0) if strategy.abductive else 0
    if dataset in study.DOCUMENT_DATASETS:
        override = optional_int(cfg.generation.get("max_tokens_document"))
        return (strategy.max_tokens_document if override is None else override) + reasoning
    override = optional_int(cfg.generation.max_tokens)
    return (strategy.max_tokens if override is None else override) + reasoning


class PromptedSystem:
    """A model under a strategy: prompts each record, generates (cached), parses the answers."""

    def __init__(
        self, cfg: DictConfig, backend, strategy: Strategy, options: PromptOptions, price: Price | None = None
    ) -> None:
        self.cfg = cfg
        self.backend = backend
        self.strategy = strategy
        self.options = options
        self.price = price  # for answers whose provider reports no cost
        self._exemplars: dict[str, list[Record]] = {}
        self._prepared: dict[tuple[str, str], list] = {}
        self._counted: set[str] = set()  # cache keys already in a dataset's usage: identical prompts count once
        self._billed: set[str] = set()  # cache keys already in ``spent``
        self.spent = {"cost_usd": 0.0, "requests": 0, "attempts": 0}  # new this run, as the answers land
        self._served_models: set[str] = set()  # issue 29 hook: the models the provider named
        self.answer_rates: dict[str, dict[str, float]] = {}  # task/dataset -> empty / mismatch shares

    def exemplars(self, task: str) -> list[Record]:
        if task not in self._exemplars:
            self._exemplars[task] = select_exemplars_for(self.cfg, self.strategy, task)
        return self._exemplars[task]

    def requests(self, plan: DatasetPlan):
        from src.backends.base import ChatRequest

        max_tokens = generation_budget(self.cfg, self.strategy, plan.dataset)
        requests = []
        for record in plan.records:
            parts = build_request_parts(self.strategy, plan.task, record.text, self.exemplars(plan.task), self.options)
            requests.append(
                ChatRequest(
                    messages=parts.messages,
                    max_tokens=int(max_tokens),
                    temperature=float(self.cfg.generation.temperature),
                    seed=int(self.cfg.generation.seed),
                    request_id=record.id,
                    response_schema=parts.response_schema,
                    completion=parts.completion,
                    stop_at_repeat=parts.stop_at_repeat,
                )
            )
        return requests

    def prepare(self, plans: list[DatasetPlan]) -> None:
        """Generate every dataset's requests in one backend call, kept for :meth:`produce`: the
        local workers then never wait at the end of one dataset (the same answers, in any order)."""
        batches = [self.requests(plan) for plan in plans]
        results = self.backend.generate(
            [request for batch in batches for request in batch],
            progress=f"{self.strategy.name}: {len(plans)} datasets",
            on_result=self._bill,
        )
        self._log_endpoint_behaviour()
        start = 0
        for plan, batch in zip(plans, batches):
            self._prepared[(plan.task, plan.dataset)] = results[start : start + len(batch)]
            start += len(batch)

    def _log_endpoint_behaviour(self) -> None:
        """What the HTTP backend settled on while answering: the structured-output form it used
        (``schema_format: auto``) and how its adaptive concurrency moved (inside the MLflow run)."""
        import mlflow

        inner = getattr(self.backend, "backend", self.backend)  # the HTTP backend inside CachedBackend
        if getattr(inner, "schema_form_used", None) is not None:
            mlflow.log_param("schema_form_used", inner.schema_form_used)
        stats = getattr(inner, "concurrency_stats", None)
        if stats is not None:
            mlflow.log_metrics({k: float(v) for k, v in stats.as_dict().items()})

    def _bill(self, index: int, result) -> None:
        """Count a newly sent request's cost and attempts the moment it lands (an interrupted run
        still records what it spent); hits and identical prompts are not billed."""
        if result.cached:
            return
        key = request_key(self.backend, result.request)
        if key is not None:
            if key in self._billed:
                return
            self._billed.add(key)
        self.spent["requests"] += 1
        self.spent["attempts"] += attempts_of(result)
        self.spent["cost_usd"] += result_cost(result, self.price)

    def usage(self, results: list) -> dict[str, float]:
        """A dataset's usage, sent apart from cached: a prompt identical to one already counted in
        this run (here or in an earlier dataset) is a ``duplicate`` with no tokens or cost of its own;
        ``attempts`` counts retries (``retried`` = attempts beyond one per sent request)."""
        usage = dict.fromkeys(USAGE_FIELDS, 0.0)
        usage["requests"] = float(len(results))
        for result in results:
            key = request_key(self.backend, result.request)
            if key is not None and key in self._counted:
                usage["duplicates"] += 1
                continue
            if key is not None:
                self._counted.add(key)
            prefix = "cached_" if result.cached else ""
            if result.cached:
                usage["cached"] += 1
            else:
                usage["sent"] += 1
                usage["attempts"] += attempts_of(result)
                usage["failed"] += result.text is None
                usage["latency_s"] += result.latency_s
            usage[f"{prefix}prompt_tokens"] += float(result.usage.get("prompt_tokens") or 0)
            usage[f"{prefix}completion_tokens"] += float(result.usage.get("completion_tokens") or 0)
            usage[f"{prefix}cost"] += result_cost(result, self.price)
        usage["retried"] = usage["attempts"] - usage["sent"]
        return usage

    def produce(self, plan: DatasetPlan) -> SystemOutput:
        from src.prompts.parsing import parse_answer

        results = self._prepared.pop((plan.task, plan.dataset), None)
        if results is None:
            results = self.backend.generate(
                self.requests(plan), progress=f"{plan.task}/{plan.dataset}", on_result=self._bill
            )
        usage = self.usage(results)
        failures = {r.request.request_id: (r.error or "no answer") for r in results if r.text is None}
        # --- issue 29 hook (backend helper): empty answers and the served model, per dataset ---
        from src.answer_record import log_answer_record

        rates = log_answer_record(plan.task, plan.dataset, results, self.backend.model_id, self._served_models)
        self.answer_rates[f"{plan.task}/{plan.dataset}"] = rates
        # --- end of issue 29 hook ---
        if failures:
            return SystemOutput(None, failures, usage)
        outputs = []
        for result in results:
            parsed = parse_answer(
                result.text,
                plan.task,
                self.strategy.abductive,
                answer_format=self.options.answer_format,
                prompt_form=self.options.form,
            )
            outputs.append(
                InstanceOutput(
                    parsed.predictions,
                    result.text,
                    parsed.ok,
                    parsed.error,
                    parsed.reasoning_steps,
                    truncated=result.finish_reason == "length",
                    well_formed=parsed.well_formed,
                    served=result.served or None,
                )
            )
        return SystemOutput(outputs, {}, usage)


def run_record(
    cfg: DictConfig, strategy: Strategy, options: PromptOptions, files: list[Path], weights: dict | None = None
) -> RunRecord:
    """The MLflow identity of a prompted configuration: traceable to its config, data and, where
    the backend names them (``weights``: its cache identity), the exact model weights."""
    model = cfg.model
    weights = weights or {}
    params: dict[str, Any] = {
        "model_id": endpoint_of(cfg)[0],  # the id the endpoint serves (provider= may map it)
        # the provider= that redirected an API model; None: the model file's own endpoint, or a local model
        "provider": OmegaConf.select(cfg, "provider.name") if model.backend in API_BACKENDS else None,
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
    system = PromptedSystem(cfg, backend, strategy, options, model_price(cfg))
    for task in dict.fromkeys(task for task, _, _ in files):  # fail before a run is opened, not inside it
        try:
            system.exemplars(task)
        except (ValueError, FileNotFoundError) as error:
            raise ConfigError(f"{task} exemplars: {error}") from None
    return system, plans


def plan_of(
    cfg: DictConfig, system: PromptedSystem, plans: list[DatasetPlan], seen: set[str] | None = None
) -> dict[str, Any]:
    """The configuration's plan (:func:`src.pricing.plan_configuration`) from the run's own requests;
    ``seen``: the request keys of the configurations planned before it in the same sweep."""
    batches = [(f"{plan.task}/{plan.dataset}", system.requests(plan)) for plan in plans]
    return plan_configuration(str(cfg.mlflow.run_name), system.backend, batches, system.price, token_counter(cfg), seen)


def run(cfg: DictConfig) -> int:
    """Run the configuration; returns the process exit code (1 when requests failed)."""
    strategy, options, files = check_config(cfg)
    budget = budget_from_config(cfg)
    store_uri = check_tracking_store(cfg)
    secrets = config_secrets(OmegaConf.to_container(cfg, resolve=True))
    system, plans = configured_system(cfg, strategy, options, files)
    backend = system.backend
    record = run_record(cfg, strategy, options, [path for _, _, path in files], backend.cache_identity())
    plan = plan_of(cfg, system, plans)
    already = spent(budget)
    problem = budget_problem(budget, plan, already)
    if problem:
        raise ConfigError(problem)
    plan["budget"] = {**budget.__dict__, "ledger_file": str(budget.ledger_file), "spent_before": already}
    log.info(
        "plan: %d requests, %d cached, %d to send, ceiling %s",
        plan["requests"],
        plan["cached"],
        plan["to_send"],
        "unknown (no price)" if plan["ceiling_cost_usd"] is None else usd(plan["ceiling_cost_usd"]),
    )

    def log_config() -> None:
        resolved = redact(OmegaConf.to_container(cfg, resolve=True), secrets)
        log_json_artifact(resolved, "config/resolved.json", secrets)
        log_json_artifact(plan, "plan.json", secrets)

    scoring = ScoringOptions(
        int(cfg.scoring.bootstrap_resamples),
        int(cfg.scoring.bootstrap_seed),
        bool(cfg.scoring.lowercase),
        tuple(cfg.scoring.get("variants") or ()),
    )
    quiet_store_tracebacks()
    opened_ms = int(time.time() * 1000) - 1000  # a run this process opens starts after this
    try:
        outcome = evaluate_configuration(
            record,
            plans,
            system,
            scoring,
            str(cfg.mlflow.experiment),
            cfg.mlflow.tracking_uri,
            secrets,
            log_config,
            evidence=OmegaConf.select(cfg, "evidence", default=None),
        )
    except StoreError:
        raise  # the store refused before the run opened: exit 2, nothing sent
    except KeyboardInterrupt:
        cached, total = answers_cached(system, plans)
        line = f"interrupted: {cached} of {total} answers cached; the same command resumes"
        raise Interrupted(line, stop_code()) from None
    except Exception as error:
        if not is_store_fault(error):
            raise
        raise StoreFailedMidRun(store_fault_line(cfg, store_uri, record.run_name, opened_ms, error)) from None
    finally:  # what was sent is spent, whether the run finished, failed or was stopped
        record_spend(budget, record.run_name, system.spent)
    if cfg.get("summary"):
        write_summary(Path(cfg.summary), record, outcome)
    for line in report_failures(outcome):
        log.error("%s (re-run the same command to complete them from the cache)", line)
    summary, warnings = run_verdict(outcome, system.answer_rates, check_rate(cfg.get("warn_rate"), "warn_rate"))
    for line in summary:
        log.info("%s", line)
    for line in warnings:
        log.warning("%s", line)
    return 0 if outcome.complete else 1


def answers_cached(system: PromptedSystem, plans: list[DatasetPlan]) -> tuple[int, int]:
    """(answers of the run now in the response cache, answers the run needs)."""
    from src.backends.cache import cache_key

    requests = [request for plan in plans for request in system.requests(plan)]
    backend = system.backend
    cached = sum(backend.cache.path(cache_key(backend.key_fields(request))).is_file() for request in requests)
    return cached, len(requests)


def store_fault_line(cfg: DictConfig, uri: str, run_name: str, opened_ms: int, error: BaseException) -> str:
    """Mark this process's run FAILED (waiting a bounded time for the store) and say what happened."""
    wait = lock_wait_s(cfg)
    what = f"tracking store {shown(uri)} failed during the run ({fault_summary(error)})"
    try:
        close_own_runs(uri, str(cfg.mlflow.experiment), run_name, opened_ms, wait)
    except Exception:  # noqa: BLE001 - still failing after the wait: the next run closes it as stale
        return (
            f"{what}; the run could not be marked FAILED within {wait:g} s (the next run of this configuration "
            "closes it): rerun the same command when the store is free"
        )
    return (
        f"{what}; the run is marked FAILED and answers so far are cached: rerun the same command when the store is free"
    )


#: Config groups renamed, so that an old override fails with the new name, not Hydra's "no match".
RENAMED_GROUPS = {"experiment": "condition"}


def renamed_group_error(overrides: list[str]) -> str | None:
    """The message for an override of a renamed config group (``experiment=...``), else None."""
    for override in overrides:
        key = override.lstrip("+~").split("=", 1)[0]
        if key in RENAMED_GROUPS:
            new = RENAMED_GROUPS[key]
            return f"the {key!r} config group is now {new!r} (conf/{new}/): use {override.replace(key, new, 1)!r}"
    return None


def forward_sigterm(signum: int, frame: object) -> None:
    """SIGTERM handler: stop exactly as Ctrl-C does (asyncio cancels the requests in flight, the run
    ends FAILED, the answers so far stay cached); only the exit code tells the two apart."""
    SignalState.terminated = True
    if not callable(signal.getsignal(signal.SIGINT)):  # SIGINT ignored (a background job): stop here
        raise KeyboardInterrupt
    signal.raise_signal(signal.SIGINT)


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    signal.signal(signal.SIGTERM, forward_sigterm)
    try:
        code = run(cfg)
    except (ConfigError, StoreError) as error:
        print(f"error: {one_line(str(error))}", file=sys.stderr)
        sys.exit(2)
    except StoreFailedMidRun as error:
        print(f"error: {one_line(str(error))}", file=sys.stderr)
        sys.exit(1)
    except Interrupted as stop:
        print(one_line(str(stop)), file=sys.stderr)
        sys.exit(stop.code)
    except KeyboardInterrupt:  # outside the run's generation: before it opened, or while writing up
        print("interrupted: the same command resumes (every answer received is cached)", file=sys.stderr)
        sys.exit(stop_code())
    if code:
        sys.exit(code)


if __name__ == "__main__":
    problem = renamed_group_error(sys.argv[1:]) or unknown_choice_error(sys.argv[1:])
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    main()
