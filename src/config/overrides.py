"""Command-line overrides checked before Hydra sees them: an unknown or renamed choice is one line.

Hydra answers ``model=nope`` with a multi-line listing and ``experiment=...`` (a group renamed
to ``condition``) with "no match"; the entry points check first and say it in one line, exit 2.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from src.core.locate import conf_dir

#: Config groups whose choice is a file ``conf/<group>/<name>.yaml``.
CHOICE_GROUPS = ("model", "strategy", "dimension", "condition", "provider")
#: Config groups renamed, so that an old override fails with the new name, not Hydra's "no match".
RENAMED_GROUPS = {"experiment": "condition"}


def unknown_choice_error(overrides: Sequence[str], conf: Path | None = None) -> str | None:
    """The message for ``model=nope`` (or strategy, dimension, condition, provider): the valid
    choices on one line; None when every choice exists.

    A multirun sweep (``model=a,b``) is checked value by value; a sweep function or an
    interpolation (``choice(...)``, ``glob(*)``, ``${...}``) is left to Hydra.
    """
    conf = conf or conf_dir()
    for override in overrides:
        key, sep, value = override.lstrip("+~").partition("=")
        if not sep or key not in CHOICE_GROUPS or value in ("", "null") or any(c in value for c in "()*$"):
            continue
        choices = sorted(path.stem for path in (conf / key).glob("*.yaml"))
        for name in value.split(","):
            if name.strip() not in choices:
                return f"{key}: unknown {name.strip()!r}; choose one of {', '.join(choices)}"
    return None


def renamed_group_error(overrides: Sequence[str]) -> str | None:
    """The message for an override of a renamed config group (``experiment=...``), else None."""
    for override in overrides:
        key = override.lstrip("+~").split("=", 1)[0]
        if key in RENAMED_GROUPS:
            new = RENAMED_GROUPS[key]
            return f"the {key!r} config group is now {new!r} (conf/{new}/): use {override.replace(key, new, 1)!r}"
    return None


def override_error(overrides: Sequence[str]) -> str | None:
    """The first problem of the command line's overrides (renamed or unknown group choice), else None."""
    return renamed_group_error(overrides) or unknown_choice_error(overrides)
