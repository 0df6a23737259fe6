"""Hydra's own copies of the configuration, without secrets: the callback ``conf/config.yaml`` registers.

Hydra saves ``config.yaml``, ``hydra.yaml`` and ``overrides.yaml`` under
``<output_dir>/.hydra/`` (and ``multirun.yaml`` in a sweep's folder) verbatim, so a header passed
as ``+model.options.extra_headers.X-Secret=...`` would sit there in plain text. This is Hydra's
entry hook: it is handed Hydra's composition, as the entry points are.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import yaml
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import OmegaConf

from src.tracking.store import config_secrets, redact

logger = logging.getLogger(__name__)


def redact_yaml_file(path: Path, secrets: tuple[str, ...]) -> bool:
    """Rewrite a YAML file with ``secrets`` and secret-looking keys redacted; True if it changed."""
    text = path.read_text(encoding="utf-8")
    tree = yaml.safe_load(text)
    cleaned = redact(tree, secrets)
    if cleaned == tree:
        return False
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(OmegaConf.to_yaml(OmegaConf.create(cleaned)), encoding="utf-8")
    os.replace(temp, path)  # atomic: concurrent multirun jobs may rewrite multirun.yaml too
    return True


class RedactHydraOutputs(Callback):
    """Strip secrets from the config copies Hydra writes, before the job runs."""

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        secrets = config_secrets(OmegaConf.to_container(config, resolve=False))
        for path in hydra_output_files(config):
            if redact_yaml_file(path, secrets):
                logger.debug("redacted secrets in %s", path)


def hydra_output_files(config: Any) -> list[Path]:
    """The YAML files Hydra wrote for this job (and its sweep) that exist."""
    hydra_cfg = config.hydra
    files: list[Path] = []
    if hydra_cfg.output_subdir is not None:
        files += sorted((Path(hydra_cfg.runtime.output_dir) / str(hydra_cfg.output_subdir)).glob("*.yaml"))
    if hydra_cfg.mode == RunMode.MULTIRUN:
        files.append(Path(str(hydra_cfg.sweep.dir)) / "multirun.yaml")
    return [path for path in files if path.is_file()]
