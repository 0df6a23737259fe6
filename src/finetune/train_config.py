"""Fine-tuning configuration: the :class:`TrainConfig` schema, its values from ``params.yaml``,
and the step schedule it implies for a training set.

Configuration is read one way: :class:`TrainConfig` is an OmegaConf structured-config schema
(types only, every field mandatory); the values come from ``params.yaml`` -- the top-level
``seed`` and ``paths.prepared``, then the ``finetune`` block, then its ``models.<model>``
mapping, then ``--set key=value`` -- so each default is written once, in ``params.yaml``.

Two schedule values adapt to small runs (both recorded in the training summary):
warmup is ``min(warmup_steps, warmup_max_fraction * total steps)``, so a run shorter than
500 steps still leaves warmup (set ``warmup_max_fraction: 1.0`` for exactly 500 steps);
evaluation/checkpoint interval is ``min(eval_steps, steps per epoch)``, so every epoch is
evaluated at least once, and the last step is always evaluated.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from src.core.settings import PARAMS_FILE, read_yaml

REPORT_CHOICES = ("mlflow", "none")


@dataclass
class TrainConfig:
    """Fine-tuning hyperparameters: the schema only (no defaults: OmegaConf makes every field
    mandatory); the values live in ``params.yaml``.

    Beyond the usual Trainer ones: ``warmup_max_fraction`` caps warmup for short runs
    (module docstring); ``max_steps`` > 0 overrides the epochs (smoke runs); ``max_length``
    caps the pieces per sentence (also the inference window); ``full_determinism`` asks
    torch for deterministic kernels on top of the seeds; ``num_threads`` sets torch's CPU
    threads (null: torch's default); ``report_to`` is ``mlflow`` (one MLflow run per
    training) or ``none``; ``include_negatives`` adds the target-free sentences of the
    train/val documents; ``group_by_length`` batches sentences of similar length together
    (less padding, the same epochs; other batches, so other weights), sorting windows of
    ``length_group_batches`` batches; ``outside_bias_grid`` holds the ``O`` log-weights
    ``calibrate_outside_bias`` tries; ``seed`` and ``data_dir`` come from the top-level ``seed`` and
    ``paths.prepared`` (``data_dir`` holds ``{task}/train.jsonl`` and ``{task}/val.jsonl``).
    """

    learning_rate: float
    weight_decay: float
    warmup_steps: int
    warmup_max_fraction: float
    num_train_epochs: float
    max_steps: int
    train_batch_size: int
    eval_batch_size: int
    eval_steps: int
    early_stopping_patience: int
    max_length: int
    logging_steps: int
    full_determinism: bool
    calibrate_outside_bias: bool
    num_threads: int | None
    report_to: str
    include_negatives: bool
    group_by_length: bool
    length_group_batches: int
    outside_bias_grid: list[float]
    seed: int
    data_dir: str

    def validate(self, where: str = "finetune") -> TrainConfig:
        """Range checks OmegaConf's types cannot express; returns the config."""
        if self.report_to not in REPORT_CHOICES:
            raise ValueError(f"{where}: report_to must be one of {REPORT_CHOICES}, got {self.report_to!r}")
        for name in (
            "train_batch_size",
            "eval_batch_size",
            "eval_steps",
            "logging_steps",
            "max_length",
            "num_threads",
            "length_group_batches",
        ):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{where}: {name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.warmup_max_fraction <= 1.0:
            raise ValueError(f"{where}: warmup_max_fraction must be in [0, 1], got {self.warmup_max_fraction}")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def reports_to_mlflow(self) -> bool:
        return self.report_to == "mlflow"


def make_config(*layers: Mapping[str, Any], where: str = "finetune") -> TrainConfig:
    """Merge mappings (lowest precedence first) onto the schema; every field must end up set.

    Unknown keys, wrongly typed values and missing values are ValueErrors naming ``where``.
    """
    try:
        merged = OmegaConf.merge(
            OmegaConf.structured(TrainConfig), *[OmegaConf.create(dict(layer)) for layer in layers]
        )
        config = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        raise ValueError(f"{where}: {str(exc).splitlines()[0]}") from None
    assert isinstance(config, TrainConfig)
    return config.validate(where)


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["learning_rate=1e-4", "seed=3"]`` -> a mapping (OmegaConf dot-list values)."""
    for item in items:
        key, sep, _ = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"override {item!r} is not key=value")
    return OmegaConf.to_container(OmegaConf.from_dotlist(list(items)))  # type: ignore[return-value]


def load_config(
    params: str | Path = PARAMS_FILE, overrides: Mapping[str, Any] | None = None, model: str | None = None
) -> TrainConfig:
    """The configuration of one training run, read from a params file.

    Precedence, lowest first: the file's top-level ``seed`` and ``paths.prepared`` (so
    neither is written twice), the ``finetune`` block, its ``models.<model>`` mapping
    (values one model needs, e.g. a higher learning rate for the small MiniLM), then
    ``overrides``.
    """
    values = read_yaml(params)
    block = values.get("finetune") or {}
    if not isinstance(block, dict):
        raise ValueError(f"{params}: 'finetune' must be a mapping")
    block = dict(block)
    per_model = block.pop("models", None) or {}
    if not isinstance(per_model, dict) or not all(isinstance(v, dict) for v in per_model.values()):
        raise ValueError(f"{params}: finetune.models must map model names to mappings")
    shared: dict[str, Any] = {}
    if "seed" in values:
        shared["seed"] = values["seed"]
    if isinstance(values.get("paths"), dict) and "prepared" in values["paths"]:
        shared["data_dir"] = values["paths"]["prepared"]
    model_values = per_model.get(model, {}) if model else {}
    return make_config(shared, block, model_values, overrides or {}, where=f"{params}: finetune")


def schedule(config: TrainConfig, n_train: int) -> dict[str, int]:
    """Total steps, effective warmup and evaluation interval for ``n_train`` examples."""
    steps_per_epoch = max(1, math.ceil(n_train / config.train_batch_size))
    total = config.max_steps if config.max_steps > 0 else math.ceil(steps_per_epoch * config.num_train_epochs)
    warmup = min(config.warmup_steps, int(config.warmup_max_fraction * total))
    eval_steps = min(config.eval_steps, steps_per_epoch, total)
    return {"steps_per_epoch": steps_per_epoch, "total_steps": total, "warmup_steps": warmup, "eval_steps": eval_steps}
