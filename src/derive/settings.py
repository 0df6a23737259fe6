"""A derive stage's settings come from its own block of ``params.yaml``, nowhere else.

``python -m src.derive.adv --task timex --input ... --output ...`` (no setting flags) builds
exactly what the DVC stage builds: the seed (``seed``), the block ``derive.<stage>`` (adv
also reads ``derive.victim``) and, from the sweep file (the profile), the instance limit
(``sweep.derive_limit``) and what a profile chooses for a stage (:data:`PROFILE_KEYS`: the
``adv_p`` generator, the embedded model offline and GPT-4.1 in the paper profile) are read
here. A setting flag on the command line is an explicit override; its default is always
"take the params file" (``None``), never a second copy of the value.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from src.core.errors import ConfigError
from src.core.settings import PARAMS_FILE, SWEEP_FILE, load_params, load_sweep

#: The top-level params keys a stage reads besides its own ``derive.<stage>`` block.
SHARED_KEYS: dict[str, tuple[str, ...]] = {"adv": ("victim",), "adv_p": (), "voc": ()}
#: Per stage, the settings a sweep profile chooses: setting -> key of the ``sweep`` block.
PROFILE_KEYS: dict[str, dict[str, str]] = {"adv_p": {"generator": "adv_p_generator"}}


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    """``--params`` and ``--sweep``: the files the settings are read from."""
    parser.add_argument("--params", default=str(PARAMS_FILE), help="the params file (seed, derive.<stage>)")
    parser.add_argument(
        "--sweep", default=str(SWEEP_FILE), help="the sweep file (sweep.derive_limit, sweep.adv_p_generator)"
    )


def stage_settings(stage: str, params: str | Path = PARAMS_FILE, sweep: str | Path = SWEEP_FILE) -> dict[str, Any]:
    """Every setting of ``stage`` as the params and sweep files define it (one flat mapping)."""
    values, profile_block = load_params(params), load_sweep(sweep)
    block = values.derive.get(stage)
    if not isinstance(block, dict):
        raise ConfigError(f"{params}: derive.{stage}: expected a mapping of the stage's settings")
    shared = {}
    for key in SHARED_KEYS.get(stage, ()):
        if key not in values.derive:
            raise ConfigError(f"{params}: derive.{key}: missing")
        shared[key] = values.derive[key]
    profile = {}
    for key, sweep_key in PROFILE_KEYS.get(stage, {}).items():
        if key in block:
            raise ConfigError(f"{params}: derive.{stage}.{key} is chosen by the profile (sweep.{sweep_key})")
        profile[key] = getattr(profile_block, sweep_key)
    return {"seed": values.seed, "limit": profile_block.derive_limit, **shared, **block, **profile}


def resolve(parser: argparse.ArgumentParser, args: argparse.Namespace, stage: str) -> argparse.Namespace:
    """``args`` with every setting the command line left unset taken from the params files.

    Each params value goes through its flag's own type and choices, so a value from the file is
    checked exactly as the same value typed on the command line; a params key without a flag is
    an error (a setting nothing would read).
    """
    actions = {action.dest: action for action in parser._actions}
    try:
        settings = stage_settings(stage, args.params, args.sweep)
    except ValueError as exc:
        parser.error(str(exc))
    for key, value in settings.items():
        action = actions.get(key)
        if action is None:
            parser.error(f"{args.params}: derive.{stage}.{key} is no setting of {parser.prog}")
        if getattr(args, key, None) is not None or (key == "limit" and hasattr(args, key)):
            continue  # given on the command line (``--limit null`` included: all records)
        if action.type is not None and value is not None:
            try:
                value = action.type(str(value).lower() if isinstance(value, bool) else str(value))
            except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
                parser.error(f"{args.params}: {key}: {exc}")
        if action.choices is not None and value not in action.choices:
            parser.error(f"{args.params}: {key}: {value!r} is not one of {', '.join(map(str, action.choices))}")
        setattr(args, key, value)
    return args
