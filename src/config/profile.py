"""A sweep profile as the overrides of a prompted run: what each ``run@`` stage of ``dvc.yaml`` runs.

The stage's command names the profile file only (``budget.sweep_file=sweep.yaml``) and passes no
value of it: :func:`with_profile` puts the profile's overrides before the command's own, so
``python -m src.run model=M strategy=S budget.sweep_file=sweep.yaml`` is the stage ``run@M-S``
by hand, and the planner (``python -m src.plan --sweep``) plans the very same list. An override
given on the command line wins over the profile's value for its key.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from src.core.settings import SweepProfile, load_sweep

#: The override that names a run's profile (its caps and ledger are read from it at run time).
SWEEP_FILE_KEY = "budget.sweep_file"


def _value(value: Any) -> str:
    return "null" if value is None else str(value)


def profile_overrides(profile: SweepProfile, path: str | Path) -> list[str]:
    """The run overrides the profile chooses (every run of it gets these)."""
    return [
        f"condition={profile.condition}",
        f"limit={_value(profile.limit)}",
        f"max_input_words={_value(profile.max_input_words)}",
        f"generation.max_tokens={_value(profile.max_tokens)}",
        f"generation.max_tokens_document={_value(profile.max_tokens_document)}",
        f"provider={profile.provider}",
        f"profile={profile.profile}",
        f"++provider.options.mode={profile.mode}",
        f"{SWEEP_FILE_KEY}={path}",
    ]


def configurations(path: str | Path) -> list[list[str]]:
    """Every configuration of the profile at ``path``, as the ``run@`` stages run them: one per
    model and strategy, in the stages' matrix order."""
    profile = load_sweep(path)
    shared = profile_overrides(profile, path)
    return [[f"model={m}", f"strategy={s}", *shared] for m in profile.models for s in profile.strategies]


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def with_profile(arguments: Sequence[str]) -> list[str]:
    """``arguments`` with the overrides of the profile its ``budget.sweep_file=FILE`` names put
    first (the command's own overrides win); unchanged without one."""
    files = [a.split("=", 1)[1] for a in arguments if _key(a) == SWEEP_FILE_KEY and "=" in a]
    if not files or files[-1] in ("", "null"):
        return list(arguments)
    given = {_key(a) for a in arguments if "=" in a}
    chosen = [o for o in profile_overrides(load_sweep(files[-1]), files[-1]) if _key(o) not in given]
    return [*chosen, *arguments]
