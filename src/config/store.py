"""What Hydra needs before it composes ``conf/``: the resolvers and the code-defined config groups.

``register_config()`` makes ``${params:...}`` and ``${study:...}`` resolvable
(:mod:`src.core.params`) and registers the groups whose defaults live in code, so that each
default has one home: ``backend_options/openai`` (:class:`~src.backends.options.OpenAIOptions`),
which every API model file merges under its ``options``. Every place that composes (the entry
points, :mod:`src.runs.offline`, the tests) calls it first; it is idempotent.
"""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from src.backends import options
from src.core.params import register_resolver


def register_config() -> None:

    register_resolver()
    for name, defaults in options.GROUPS.items():
        ConfigStore.instance().store(group="backend_options", name=name, node=defaults())
