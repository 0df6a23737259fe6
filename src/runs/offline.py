"""One configuration composed as ``python -m src.run`` would, without running it.

``python -m src.cache --run`` lists the cache keys of its requests and ``python -m src.plan``
prices them. The configuration is composed from ``conf/`` with the same overrides a run takes,
and its requests are built by the run's own code (:func:`src.runs.configure.configured_system`), so the
keys are exactly those the run would look up. Nothing is sent: a missing API key is replaced by
a placeholder for the time it takes to build the backend's cache identity.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException

from src.backends.cache import cache_key
from src.backends.endpoint import API_BACKENDS
from src.config.schema import RunConfig
from src.config.store import register_config
from src.core.locate import conf_dir
from src.runs.configure import configured_system, endpoint, planned_datasets
from src.runs.prompted import PromptedSystem
from src.scoring.system import DatasetPlan

CONFIG_DIR = conf_dir()


def load_config(overrides: Sequence[str]) -> RunConfig:
    """The run's typed configuration for ``overrides``, composed and checked as ``python -m src.run``
    does; ValueError (one line, a ConfigError for a bad value) when they do not compose or check."""

    register_config()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            composed = compose("config", overrides=list(overrides))
    except HydraException as error:
        raise ValueError(str(error).splitlines()[0]) from None
    return RunConfig.from_hydra(composed)


def offline_system(config: RunConfig) -> tuple[PromptedSystem, list[DatasetPlan]]:
    """(system, dataset plans) of a configuration, built without its API key or a request.

    Raises:
        ValueError: the configuration cannot run (a :class:`~src.core.errors.ConfigError`).
    """
    files = planned_datasets(config)
    options = endpoint(config)[1]  # the key variable follows provider=
    key_variable = options.get("api_key_env") if config.model.backend in API_BACKENDS else None
    placeholder = bool(key_variable) and not os.environ.get(key_variable)
    if placeholder:
        os.environ[key_variable] = "placeholder-for-cache-listing"
    try:
        return configured_system(config, files)
    finally:
        if placeholder:
            del os.environ[key_variable]


def configuration_keys(overrides: Sequence[str]) -> set[str]:
    """Cache keys of every request ``python -m src.run <overrides>`` would send.

    Raises:
        ValueError: the overrides do not compose or do not describe a runnable configuration.
    """

    system, plans = offline_system(load_config(overrides))
    backend = system.backend
    return {cache_key(backend.key_fields(request)) for plan in plans for request in system.requests(plan)}
