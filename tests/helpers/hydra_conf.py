"""The project's ``conf/`` and its groups, composed as ``src.run`` composes them, for the config tests."""

from __future__ import annotations

from hydra import compose, initialize_config_dir

from tests.helpers.paths import REPO_ROOT

CONF = REPO_ROOT / "conf"
MODELS = sorted(p.stem for p in (CONF / "model").glob("*.yaml"))
STRATEGIES = sorted(p.stem for p in (CONF / "strategy").glob("*.yaml"))
DIMENSIONS = sorted(p.stem for p in (CONF / "dimension").glob("*.yaml"))


def compose_conf(*overrides: str):
    """``conf/config.yaml`` composed with Hydra ``overrides`` (e.g. ``"model=qwen3_moe"``)."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))
