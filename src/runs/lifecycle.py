"""One prompted run from a checked configuration to its verdict: plan, reserve, evaluate, settle.

The run plans what it will send (:func:`src.runs.configure.plan_of`), reserves the plan's
ceiling in its budget ledger (:mod:`src.billing.ledger`; a plan past a cap is one ``error:
budget: ...`` line, exit 2, before any request), evaluates through the one evaluation runner
(:mod:`src.tracking.evaluation`), and settles the ledger to what it really spent whatever happens
(finished, failed, Ctrl-C, SIGTERM). Ctrl-C or SIGTERM ends the run FAILED with one line
(``interrupted: N of M answers cached; ...``) and exit code 130 / 143; a store that fails
mid-run marks the run FAILED after a bounded wait, exit code 1. The run ends with its verdict:
F1 per dataset, what it spent against its plan, and a warning naming the datasets whose answers
are not to trust (:mod:`src.runs.verdict`).
"""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from src.billing.ledger import reserve, spent, usd
from src.billing.usage import spend_line
from src.config.checks import check_rate
from src.config.errors import ConfigError
from src.runs.configure import (
    budget_from_config,
    check_config,
    configured_system,
    lock_wait_s,
    plan_of,
    run_record,
)
from src.runs.prompted import PromptedSystem
from src.runs.verdict import run_verdict
from src.tracking.evaluation import (
    DatasetPlan,
    ScoringOptions,
    evaluate_configuration,
    report_failures,
    run_usage,
    write_summary,
)
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


def check_tracking_store(cfg: DictConfig) -> str:
    """The tracking URI, once the store is known to be usable (not corrupt, not locked)."""
    uri = resolve_tracking_uri(cfg.mlflow.tracking_uri)
    try:
        check_store(uri, lock_wait_s(cfg))
    except StoreUnusable as error:
        raise StoreError(str(error)) from None
    return uri


def run(cfg: DictConfig) -> int:
    """Run the configuration; returns the process exit code (1 when requests failed)."""
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    strategy, options, files = check_config(cfg)
    budget = budget_from_config(cfg)
    store_uri = check_tracking_store(cfg)
    secrets = config_secrets(OmegaConf.to_container(cfg, resolve=True))
    system, plans = configured_system(cfg, strategy, options, files)
    record = run_record(cfg, strategy, options, [path for _, _, path in files], system.backend.cache_identity())
    plan = plan_of(cfg, system, plans)
    before = spent(budget)
    reservation = reserve(budget, record.run_name, plan["ceiling_cost_usd"], int(plan["to_send"]))
    for note in reservation.notes:
        log.warning("%s", note)
    system.meter.reservation = reservation
    plan["budget"] = {
        **{k: v for k, v in budget.__dict__.items() if k != "ledger_file"},
        "ledger_file": str(budget.ledger_file),
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

    def log_config() -> None:
        import mlflow

        resolved = redact(OmegaConf.to_container(cfg, resolve=True), secrets)
        log_json_artifact(resolved, "config/resolved.json", secrets)
        log_json_artifact(plan, "plan.json", secrets)
        if plan["ceiling_cost_usd"] is not None:
            mlflow.log_metric("usage.plan_ceiling_cost_usd", float(plan["ceiling_cost_usd"]))

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
        reservation.settle(system.meter.spend())
    if cfg.get("summary"):
        write_summary(Path(cfg.summary), record, outcome)
    for line in report_failures(outcome):
        log.error("%s (re-run the same command to complete them from the cache)", line)
    log.info("%s", spend_line(run_usage(outcome), plan["ceiling_cost_usd"]))
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


__all__ = ["ConfigError", "Interrupted", "StoreFailedMidRun", "forward_sigterm", "run", "stop_code"]
