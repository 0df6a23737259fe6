"""Run one configuration (model x reasoning strategy) over its tasks and datasets.

``python -m src.run model=qwen3_moe strategy=I`` composes ``conf/`` with Hydra and hands the
configuration to :func:`src.runs.lifecycle.run`, which checks every override before anything
starts, plans and reserves the run's budget, generates through the response cache, scores and
logs the MLflow run ``{model}-{strategy}``. This entry point turns what can go wrong into one
line and an exit code: a bad override, value, budget or tracking store is exit 2 before any
request; failed requests exit 1 (a re-run sends only what is missing); a store that fails
mid-run exits 1; Ctrl-C exits 130 and SIGTERM 143, the run FAILED and its answers cached. In a
multirun a failed job raises instead, so the launcher finishes the other jobs (a budget refusal
of one configuration never kills the requests of another in flight) and the sweep exits 1.
"""

from __future__ import annotations

import signal
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from src.cli import one_line
from src.config.overrides import override_error
from src.config.profile import with_profile
from src.config.schema import RunConfig
from src.config.store import register_config
from src.core.errors import ConfigError
from src.core.locate import conf_dir
from src.launch import launch
from src.redact import install_log_redaction
from src.runs.lifecycle import Interrupted, StoreFailedMidRun, forward_sigterm, run, stop_code
from src.tracking.store import StoreError

register_config()


class JobFailed(RuntimeError):
    """A multirun job that did not succeed: raised (not exited) so that Hydra's launcher lets the
    sweep's other jobs finish, then reports it (a job's SystemExit would stop them mid-request)."""


def in_multirun() -> bool:

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def end(code: int, line: str | None = None) -> None:
    """Print the run's one line and end with ``code``; in a multirun, fail the job instead."""
    if line:
        print(line, file=sys.stderr)
    if not code:
        return
    if in_multirun():
        raise JobFailed(f"exit code {code}: {line or 'requests failed (see the log above)'}")
    sys.exit(code)


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")  # absolute: any launcher
def run_composed(cfg: DictConfig) -> None:
    """Hydra's task: the composed configuration, typed and run."""
    install_log_redaction()  # Hydra has set up the handlers by now
    signal.signal(signal.SIGTERM, forward_sigterm)
    try:
        code = run(RunConfig.from_hydra(cfg))  # the one place the composition is read and checked
    except (ConfigError, StoreError) as error:
        return end(2, f"error: {one_line(str(error))}")
    except StoreFailedMidRun as error:
        return end(1, f"error: {one_line(str(error))}")
    except Interrupted as stop:  # a person or scheduler stopped it: the whole sweep stops too
        print(one_line(str(stop)), file=sys.stderr)
        sys.exit(stop.code)
    except KeyboardInterrupt:  # outside the run's generation: before it opened, or while writing up
        print("interrupted: the same command resumes (every answer received is cached)", file=sys.stderr)
        sys.exit(stop_code())
    end(code)


def main() -> int:
    """The command line (``sys.argv``): the overrides checked, the profile's put first, then Hydra."""
    problem = override_error(sys.argv[1:])
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        sys.argv[1:] = with_profile(sys.argv[1:])  # a run@ stage names its profile, Hydra gets its values
    except ConfigError as error:
        print(f"error: {one_line(str(error))}", file=sys.stderr)
        return 2
    run_composed()
    return 0


if __name__ == "__main__":
    launch(main)
