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

from src.config.locate import conf_dir

CONFIG_DIR = conf_dir()


def compose_config(overrides: Sequence[str]):
    """The run's DictConfig for ``overrides``; ValueError (one line) when they do not compose."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    from src.config.store import register_config

    register_config()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            return compose("config", overrides=list(overrides))
    except HydraException as error:
        raise ValueError(str(error).splitlines()[0]) from None


def offline_system(cfg):
    """(system, dataset plans) of a composed configuration, built without its API key or a request.

    Raises:
        ValueError: the configuration cannot run (``src.config.checks.ConfigError`` is one).
    """

    from src.config.checks import endpoint_of
    from src.runs.configure import check_config, configured_system

    strategy, options, files = check_config(cfg)
    model_options = endpoint_of(cfg)[1]  # the key variable follows provider=
    key_variable = model_options.get("api_key_env", "OPENROUTER_API_KEY") if cfg.model.backend == "openai" else None
    placeholder = bool(key_variable) and not os.environ.get(key_variable)
    if placeholder:
        os.environ[key_variable] = "placeholder-for-cache-listing"
    try:
        return configured_system(cfg, strategy, options, files)
    finally:
        if placeholder:
            del os.environ[key_variable]


def configuration_keys(overrides: Sequence[str]) -> set[str]:
    """Cache keys of every request ``python -m src.run <overrides>`` would send.

    Raises:
        ValueError: the overrides do not compose or do not describe a runnable configuration.
    """
    from src.backends.cache import cache_key

    system, plans = offline_system(compose_config(overrides))
    backend = system.backend
    return {cache_key(backend.key_fields(request)) for plan in plans for request in system.requests(plan)}
