"""The cache keys of one configuration's requests, for ``python -m src.cache --run``.

The configuration is composed from ``conf/`` with the same overrides a run takes, and its
requests are built by the run's own code, so the keys are exactly those the run would look up.
Nothing is sent: a missing API key is replaced by a placeholder for the time it takes to build
the backend's cache identity.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parents[1] / "conf"


def configuration_keys(overrides: Sequence[str]) -> set[str]:
    """Cache keys of every request ``python -m src.run <overrides>`` would send.

    Raises:
        ValueError: the overrides do not compose or do not describe a runnable configuration.
    """
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    from src.backends.cache import cache_key
    from src.run import PromptedSystem, build_backend, check_config, checked_count, planned_records
    from src.scoring.runner import DatasetPlan

    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose("config", overrides=list(overrides))
    except HydraException as error:
        raise ValueError(str(error).splitlines()[0]) from None
    strategy, options, files = check_config(cfg)
    model_options = OmegaConf.to_container(cfg.model.get("options") or {}, resolve=True)
    key_variable = model_options.get("api_key_env", "OPENROUTER_API_KEY") if cfg.model.backend == "openai" else None
    placeholder = bool(key_variable) and not os.environ.get(key_variable)
    if placeholder:
        os.environ[key_variable] = "placeholder-for-cache-listing"
    try:
        backend = build_backend(cfg)
    finally:
        if placeholder:
            del os.environ[key_variable]
    system = PromptedSystem(cfg, backend, strategy, options)
    limit, max_words = checked_count(cfg, "limit"), checked_count(cfg, "max_input_words")
    keys = set()
    for task, dataset, path in files:
        plan = DatasetPlan(task, dataset, path, planned_records(path, limit, int(cfg.seed), max_words))
        keys.update(cache_key(backend.key_fields(request)) for request in system.requests(plan))
    return keys
