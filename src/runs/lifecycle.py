"""One prompted run from a checked configuration to its closing lines: plan, reserve, evaluate, settle.

The run plans what it will send (:func:`src.runs.configure.plan_of`), reserves the plan's
ceiling in its budget ledger through its paid session (:mod:`src.billing.session`; a plan past a
cap, or a paid sweep profile without ``sweep.max_cost_usd``, is one ``error: budget: ...`` line,
exit 2, before any request; a stale price is named first), evaluates through the one evaluation runner
(:mod:`src.tracking.evaluation`), and settles the ledger to what it really spent whatever happens
(finished, failed, Ctrl-C, SIGTERM). Ctrl-C or SIGTERM ends the run FAILED with one line
(``interrupted: N of M answers cached; ...``) and exit code 130 / 143; a store that fails
mid-run marks the run FAILED after a bounded wait, exit code 1. The run ends with its closing lines:
F1 per dataset, what it spent against its plan, and a warning naming the datasets whose answers
are not to trust (:mod:`src.runs.closing_lines`).
"""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path

from src.backends.batch_state import open_batches
from src.backends.cache import cache_key
from src.billing.earlier import EarlierAttempts
from src.billing.ledger import journals_folder, spent, usd
from src.billing.prices import price_age_warning
from src.billing.session import PaidSession
from src.config.budget import uncapped_sweep
from src.config.schema import RunConfig
from src.core.errors import ConfigError
from src.runs.closing_lines import run_closing_lines
from src.runs.configure import configured_system, plan_of, planned_datasets, run_record
from src.runs.prompted import PromptedSystem
from src.runs.usage import spend_line
from src.scoring.system import DatasetPlan, ScoringOptions
from src.tracking.evaluation import evaluate_configuration, report_failures, run_usage, write_summary
from src.tracking.health import (
    StoreUnusable,
    check_store,
    close_own_runs,
    fault_summary,
    is_store_fault,
    quiet_store_tracebacks,
    shown,
)
from src.tracking.store import (
    StoreError,
    config_secrets,
    log_json_artifact,
    redact,
    tracking_uri as resolve_tracking_uri,
)

log = logging.getLogger("src.run")
#: Client libraries that log every HTTP request at INFO: a paper-scale run would print 281,000 lines.
QUIET_LOGGERS = ("httpx", "httpcore", "openai")

EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130, what a shell reports for Ctrl-C
# 143: SIGTERM stops the run exactly as Ctrl-C does (same line, run FAILED, answers cached); only
# the code differs, the one shells, `timeout`, systemd and CI report for a terminated process, so
# whoever stopped the run (a scheduler, not a person) can tell from the exit code
EXIT_TERMINATED = 128 + signal.SIGTERM


class SignalState:
    """Whether the stop came from SIGTERM (delivered as Ctrl-C, see :func:`forward_sigterm`)."""

    terminated = False


def stop_code() -> int:
    return EXIT_TERMINATED if SignalState.terminated else EXIT_INTERRUPTED


def forward_sigterm(signum: int, frame: object) -> None:
    """SIGTERM handler: stop exactly as Ctrl-C does (asyncio cancels the requests in flight, the run
    ends FAILED, the answers so far stay cached); only the exit code tells the two apart."""
    SignalState.terminated = True
    if not callable(signal.getsignal(signal.SIGINT)):  # SIGINT ignored (a background job): stop here
        raise KeyboardInterrupt
    signal.raise_signal(signal.SIGINT)


class StoreFailedMidRun(RuntimeError):
    """The tracking store failed while the run was open; the message is one line, exit code 1."""


class Interrupted(RuntimeError):
    """Ctrl-C or SIGTERM during the run: the one line to print and the exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def check_tracking_store(config: RunConfig) -> str:
    """The tracking URI, once the store is known to be usable (not corrupt, not locked)."""
    uri = resolve_tracking_uri(config.mlflow.tracking_uri)
    try:
        check_store(uri, config.mlflow.lock_wait_s)
    except StoreUnusable as error:
        raise StoreError(str(error)) from None
    return uri


def run(config: RunConfig) -> int:
    """Run the configuration; returns the process exit code (1 when requests failed)."""
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    files = planned_datasets(config)
    store_uri = check_tracking_store(config)
    secrets = config_secrets(config.raw)
    system, plans = configured_system(config, files)
    record = run_record(config, [path for _, _, path in files], system.backend.cache_identity())
    plan = plan_of(config, system, plans)
    scope = journal_scope(record)
    session = reserve_plan(config, plan, system, plans, scope)
    # what earlier, interrupted processes of this run (its key) were billed: its usage counts it (item 8)
    system.earlier = EarlierAttempts.of_run(journals_folder(config.budget), scope)
    opened_ms = int(time.time() * 1000) - 1000  # a run this process opens starts after this
    try:
        outcome = evaluate_configuration(
            record,
            plans,
            system,
            ScoringOptions(
                config.scoring.bootstrap_resamples,
                config.scoring.bootstrap_seed,
                config.scoring.lowercase,
                config.scoring.variants,
            ),
            config.mlflow.experiment,
            config.mlflow.tracking_uri,
            secrets,
            lambda: log_config(config, plan, secrets),
            evidence=config.evidence,
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
        raise StoreFailedMidRun(store_fault_line(config, store_uri, record.run_name, opened_ms, error)) from None
    finally:  # what was sent is spent, whether the run finished, failed or was stopped
        session.settle()
    code = conclude(config, record, outcome, system, plan)
    if outcome.complete:  # its usage counted the earlier processes' attempts: a rerun starts afresh
        system.earlier.drop(also=session.reservation.carried)
    return code


def journal_scope(record) -> str:
    """Whose spend journals a run carries and reads: its name and key (another profile's run of the
    same name computes something else, and its interrupted purchases are its own)."""
    return f"{record.run_name}-{record.key}"


def reserve_plan(
    config: RunConfig, plan: dict, system: PromptedSystem, plans: list[DatasetPlan], scope: str | None = None
) -> PaidSession:
    """The run's paid session (:mod:`src.billing.session`): the price's age named first, the plan's
    ceiling reserved in the run's ledger (one ``error: budget: ...`` line when it does not fit,
    or when a paid sweep profile sets no cap), the meter attached; the reservation recorded in
    the plan."""
    budget = config.budget
    stale_price = price_age_warning(config.model.name, config.model.price, budget.price_max_age_days)
    if stale_price:
        log.warning("%s", stale_price)
    before = spent(budget)
    session = PaidSession(
        config.run_name, system.meter, budget, sweep=uncapped_sweep(budget), keep_journal=True, scope=scope
    )
    # a resumed run's own batches (holding its requests): their holds are its reservation
    in_flight = open_batches(system.backend, [r for p in plans for r in system.requests(p)])
    reservation = session.reserve(plan["ceiling_cost_usd"], int(plan["to_send"]), in_flight)
    session.attach(system.backend)
    plan["budget"] = {
        "max_cost_usd": budget.max_cost_usd,
        "max_requests": budget.max_requests,
        "ledger": budget.ledger,
        "stale_after_s": budget.stale_after_s,
        "ledger_file": None if budget.ledger_file is None else str(budget.ledger_file),
        "spent_before": before,
        "reserved": {"cost_usd": reservation.cost_usd, "requests": reservation.requests},
    }
    log.info(
        "plan: %d requests, %d cached, %d to send (%s mode), ceiling %s",
        plan["requests"],
        plan["cached"],
        plan["to_send"],
        plan["mode"],
        "unknown (no price)" if plan["ceiling_cost_usd"] is None else usd(plan["ceiling_cost_usd"]),
    )
    quiet_store_tracebacks()
    return session


def log_config(config: RunConfig, plan: dict, secrets: tuple[str, ...]) -> None:
    """The run's resolved configuration and plan, inside its MLflow run (secrets redacted)."""
    import mlflow

    log_json_artifact(redact(config.raw, secrets), "config/resolved.json", secrets)
    log_json_artifact(plan, "plan.json", secrets)
    if plan["ceiling_cost_usd"] is not None:
        mlflow.log_metric("usage.plan_ceiling_cost_usd", float(plan["ceiling_cost_usd"]))


def conclude(config: RunConfig, record, outcome, system: PromptedSystem, plan: dict) -> int:
    """Write the summary, name the failures, say what was spent and the closing lines; the exit code."""
    if config.summary:
        write_summary(Path(config.summary), record, outcome, config.mlflow.experiment, config.mlflow.tracking_uri)
    for line in report_failures(outcome):
        log.error("%s (re-run the same command to complete them from the cache)", line)
    log.info("%s", spend_line(run_usage(outcome), plan["ceiling_cost_usd"]))
    summary, warnings = run_closing_lines(outcome, system.answer_rates, config.warn_rate)
    for line in summary:
        log.info("%s", line)
    for line in warnings:
        log.warning("%s", line)
    return 0 if outcome.complete else 1


def answers_cached(system: PromptedSystem, plans: list[DatasetPlan]) -> tuple[int, int]:
    """(answers of the run now in the response cache, answers the run needs)."""

    requests = [request for plan in plans for request in system.requests(plan)]
    backend = system.backend
    cached = sum(backend.cache.path(cache_key(backend.key_fields(request))).is_file() for request in requests)
    return cached, len(requests)


def store_fault_line(config: RunConfig, uri: str, run_name: str, opened_ms: int, error: BaseException) -> str:
    """Mark this process's run FAILED (waiting a bounded time for the store) and say what happened."""
    wait = config.mlflow.lock_wait_s
    what = f"tracking store {shown(uri)} failed during the run ({fault_summary(error)})"
    try:
        close_own_runs(uri, config.mlflow.experiment, run_name, opened_ms, wait)
    except Exception:  # noqa: BLE001 - still failing after the wait: the next run closes it as stale
        return (
            f"{what}; the run could not be marked FAILED within {wait:g} s (the next run of this configuration "
            "closes it): rerun the same command when the store is free"
        )
    return (
        f"{what}; the run is marked FAILED and answers so far are cached: rerun the same command when the store is free"
    )


__all__ = ["ConfigError", "Interrupted", "StoreFailedMidRun", "forward_sigterm", "run", "stop_code"]
