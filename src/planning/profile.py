"""What a sweep profile sends, from the profile's own settings, also before anything is derived.

``python -m src.plan --sweep PROFILE`` prices the ``run@`` stages' configurations; two parts of a
profile are not in those commands and are planned here:

* **The derived sets** (``adv``, ``adv_p``, ``voc``) a configuration reads. A set already built
  *for this profile* (its stats say the profile's ``sweep.derive_limit``, the params' seed and, for
  ``adv_p``, the profile's generator) is read as it is. Otherwise (a fresh clone, or a checkout
  that built another profile's sets) it is *estimated*: one record per instance of the base set's
  seeded ``derive_limit`` subset (the instances the derive stage perturbs; a derived set keeps at
  most one record per base instance), the base sentence standing in for its perturbed version
  (``adv_p`` rewrites are 0.8-1.3 times its length), marked with the set's name so that it is not
  taken for an identical prompt of ``base``. The stand-ins go to a temporary folder the
  plan points ``paths.derived`` at, and the output names every estimated set.
* **The rewriting stage**: an API ``adv_p`` generator (GPT-4.1 in the paper profile) is a paid
  caller. Its requests (every attempt of every instance, ``derive.adv_p.max_attempts``) are
  planned as the stage reserves them (:func:`src.derive.rewrite_billing.rewrite_plan`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from src import study
from src.backends import create_backend
from src.backends.cache import CachedBackend, ResponseCache
from src.config.schema import RunConfig
from src.core.settings import PARAMS_FILE, SweepProfile, load_sweep, params_tree
from src.data.datasets import build_datasets, write_datasets
from src.data.schema import Record, read_records, write_records
from src.data.splits import subset_by_id
from src.derive.rewrite_billing import (
    generator_price,
    is_paid,
    model_config_path_of,
    read_model_file,
    rewrite_plan,
    rewrite_requests,
)
from src.derive.rewrite_prompts import EDIT_KINDS
from src.derive.settings import stage_settings


@dataclass
class ProfileParts:
    """The derived-set folder the configurations read (``paths.derived``), the lines naming what
    was estimated, and the folder to remove once planned."""

    derived: Path | None = None
    notes: list[str] = field(default_factory=list)
    temporary: tempfile.TemporaryDirectory | None = None
    prepared: Path | None = None
    prepared_temporary: tempfile.TemporaryDirectory | None = None

    @property
    def overrides(self) -> list[str]:
        paths = [("paths.prepared", self.prepared), ("paths.derived", self.derived)]
        return [f"{key}={value}" for key, value in paths if value is not None]

    def close(self) -> None:
        for folder in (self.temporary, self.prepared_temporary):
            if folder is not None:
                folder.cleanup()


def built_for(stats_file: Path, limit: Any, seed: int, generator: dict | None) -> bool:
    """Whether a derived set's stats say it was built with this limit, seed (and generator)."""
    try:
        stats = json.loads(stats_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(stats, dict) or stats.get("limit") != limit or stats.get("seed") != seed:
        return False
    return generator is None or (stats.get("generator") or {}).get("model_id") == generator.get("model_id")


def stand_in(record: Record, name: str) -> Record:
    """A base record standing in for its version in the derived set ``name``: its sentence marked
    with the set's name, so its prompt is not counted as an identical prompt of ``base`` (the
    perturbed sentence differs from it; the mark only lengthens the ceiling)."""
    return dataclasses.replace(record, text=f"{record.text} [{name}]")


def adv_p_generator(profile: SweepProfile) -> tuple[str, dict[str, Any]]:
    """(name, model file as Hydra composes it) of the profile's ``sweep.adv_p_generator``."""
    name = profile.adv_p_generator
    return name, read_model_file(model_config_path_of(name))


def prepared_sets(config: RunConfig, parts: ProfileParts) -> Path:
    """The prepared sets' folder: ``paths.prepared`` when every test set a run reads is there, else
    the prepare stage's datasets built from ``data/raw`` into a temporary folder (a fresh clone:
    the same code and params as ``dvc repro prepare``, nothing written to ``data/prepared``)."""
    prepared = Path(config.paths.prepared)
    needed = [
        prepared / task / f"{name}.jsonl"
        for name, dataset in study.DATASETS.items()
        if not dataset.derived
        for task in dataset.tasks
    ]
    if all(path.is_file() for path in needed):
        return prepared
    params = params_tree()
    raw = [Path(str(value)) for key, value in params["data"].items() if key.endswith("_dir") and value]
    absent = [str(path) for path in raw if not path.is_dir()]
    if absent:
        raise ValueError(
            f"{', '.join(absent)} not found: the plan builds the test sets from the raw corpora (`dvc pull data.dvc`)"
        )
    parts.prepared_temporary = tempfile.TemporaryDirectory(prefix="tempgen-plan-prepared-")
    parts.prepared = Path(parts.prepared_temporary.name)
    write_datasets(build_datasets(params, int(params["seed"])), parts.prepared)
    parts.notes.append(
        f"{prepared} has not been built: the test sets were prepared from data/raw for this plan "
        "(the prepare stage's code and params; nothing written to it)"
    )
    return parts.prepared


def derived_sets(profile: SweepProfile, config: RunConfig) -> ProfileParts:
    """The prepared sets (built for the plan when absent) and the derived sets the profile's
    configurations will read: built ones where they were built for this profile, stand-ins for
    the others (see the module doc)."""
    limit, seed = profile.derive_limit, config.seed
    parts = ProfileParts()
    prepared = prepared_sets(config, parts)
    generator = adv_p_generator(profile)[1]
    temporary = tempfile.TemporaryDirectory(prefix="tempgen-plan-derived-")
    root = Path(temporary.name)
    estimated = []
    for name in study.DERIVED_DATASETS:
        for task in study.DATASETS[name].tasks:
            built = Path(config.paths.derived) / task / f"{name}.jsonl"
            target = root / task / f"{name}.jsonl"
            target.parent.mkdir(parents=True, exist_ok=True)
            stats = built.with_name(f"{name}.stats.json")
            wanted = generator if name == "adv_p" else None
            if built.is_file() and built_for(stats, limit, seed, wanted):
                os.symlink(built.resolve(), target)
                continue
            base = prepared / task / "base.jsonl"
            records = [stand_in(record, name) for record in subset_by_id(read_records(base), limit, seed)]
            write_records(target, records)
            estimated.append(f"{task}/{name} ({len(records)})")
    if estimated:
        how = "all base instances" if limit is None else f"sweep.derive_limit={limit} base instances"
        parts.notes.append(
            "estimated (not built for this profile yet): " + ", ".join(estimated) + f": one record per instance "
            f"of {how}, the base sentence standing in for its perturbed version (docs/cost.md)"
        )
    parts.derived, parts.temporary = root, temporary
    return parts


def rewriting_plans(profile_file: Path, profile: SweepProfile, config: RunConfig) -> list[dict[str, Any]]:
    """The plan of the ``adv_p`` stage per task when its generator is an API model (none for a
    local generator: it costs nothing). Nothing is sent; a missing key is a placeholder."""
    name, model_file = adv_p_generator(profile)
    backend_name = str(model_file.get("backend"))
    if not is_paid(backend_name):
        return []
    settings = stage_settings("adv_p", PARAMS_FILE, profile_file)
    options = dict(model_file.get("options") or {})
    key_variable = options.get("api_key_env")
    placeholder = bool(key_variable) and not os.environ.get(key_variable)
    if placeholder:
        os.environ[key_variable] = "placeholder-for-the-plan"
    try:
        inner = create_backend(backend_name, model_id=str(model_file.get("model_id")), **options)
    finally:
        if placeholder:
            del os.environ[key_variable]
    backend = CachedBackend(inner, ResponseCache(config.paths.cache))
    price = generator_price(model_file, f"conf/model/{name}.yaml")
    plans = []
    for task in study.DATASETS["adv_p"].tasks:
        base = Path(config.paths.prepared) / task / "base.jsonl"
        if not base.is_file():
            continue
        records = subset_by_id(read_records(base), settings["limit"], settings["seed"])
        requests = rewrite_requests(records, int(settings["max_attempts"]), int(settings["seed"]), EDIT_KINDS)
        plan = rewrite_plan(f"rewriting adv_p@{task} ({name})", backend, requests, price, f"{task}/adv_p")
        plan["stage"] = f"adv_p@{task}"
        plan["instances"] = len(records)
        plans.append(plan)
    return plans


def read_profile(path: Path) -> SweepProfile:
    """The ``sweep`` block of a profile file, checked (ConfigError: one line naming the key)."""
    return load_sweep(path)
