"""The one reader of the project's settings files: ``params.yaml``, a sweep profile, ``dvc.yaml``
and the plain blocks of ``conf/config.yaml``.

Every module that needs a setting gets it from here, typed (pydantic models that forbid unknown
keys), never by parsing a file itself (``tests/test_settings.py`` greps ``src`` for YAML parsing
outside this module). A file that cannot be read, a key no model declares and a value of the wrong
type are one :class:`~src.core.errors.ConfigError` line, ``FILE: KEY: what is wrong``, which every
entry point reports with exit code 2.

Each value has one home: the pipeline's settings live in ``params.yaml`` (DVC tracks them there),
so their models declare types and bounds and no defaults; a sweep profile states every key, so
its model has none either. Hydra's groups (``conf/``) are typed by :mod:`src.config.schema`.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from src.core.errors import ConfigError
from src.core.locate import conf_dir, project_file
from src.core.values import MAX_RESAMPLES

PARAMS_FILE = project_file("params.yaml")
SWEEP_FILE = project_file("sweep.yaml")
DVC_FILE = project_file("dvc.yaml")


def _text(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot read ({' '.join(str(error).split())})") from None


def read_yaml(path: str | Path, text: str | None = None) -> dict[str, Any]:
    """A settings file's mapping (an empty file is an empty mapping); one line when unreadable."""
    try:
        tree = yaml.safe_load(_text(path) if text is None else text)
    except yaml.YAMLError as error:
        reason = " ".join(str(error).split())
        raise ConfigError(f"{path}: cannot read ({reason})") from None
    if tree is None:
        return {}
    if not isinstance(tree, dict):
        raise ConfigError(f"{path}: expected a mapping of settings, got {type(tree).__name__}")
    return tree


class Settings(BaseModel):
    """A block of settings: typed, frozen, and a key it does not declare is a typo."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def parse(model: type[Settings], tree: Any, source: str | Path) -> Any:
    """``tree`` checked against ``model``: the first problem as ``SOURCE: KEY: message``."""
    try:
        return model.model_validate(tree)
    except ValidationError as error:
        first = error.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        given = "" if first["type"] in ("extra_forbidden", "missing") else f", got {first.get('input')!r}"
        message = "no such setting" if first["type"] == "extra_forbidden" else first["msg"].lower()
        raise ConfigError(f"{source}: {key or '(top level)'}: {message}{given}") from None


class Paths(Settings):
    raw: str
    prepared: str
    derived: str


class Study(Settings):
    """The vocabulary's lists DVC iterates (``src/study.py`` holds them; a test keeps them equal)."""

    token_classifier_tasks: list[str]
    derived_tasks: dict[str, list[str]]


class Analysis(Settings):
    """The analysis' settings (``src/analyze.py``'s flags override them)."""

    resamples: int = Field(ge=1, le=MAX_RESAMPLES, description="paired bootstrap resamples per comparison")
    alpha: float = Field(gt=0, lt=0.5, description="significance level of the corrected tests")
    correction: Literal["holm", "bh"] = Field(description="multiple-comparison correction")
    margin: float = Field(gt=0, lt=1, description="equivalence margin (F1)")
    resample_unit: Literal["document", "instance"] = Field(description="what a bootstrap resample draws")
    power: float = Field(ge=0.5, lt=1, description="the power minimum detectable differences are stated at")
    flip_threshold: float = Field(ge=0, lt=1, description="a per-instance F1 drop above this is a flip")


class Params(Settings):
    """``params.yaml``. The blocks another component types stay mappings here, each typed where it
    is read: ``numerics`` (:class:`src.numerics.Numerics`), ``finetune``
    (:class:`src.finetune.train_config.TrainConfig`), ``data`` (the prepare stage) and ``derive``
    (:mod:`src.derive.settings`)."""

    seed: int = Field(ge=0)
    study: Study
    numerics: dict[str, Any]
    paths: Paths
    data: dict[str, Any]
    finetune: dict[str, Any]
    analysis: Analysis
    derive: dict[str, Any]


class SweepProfile(Settings):
    """A sweep profile's ``sweep`` block (``sweep.yaml``, ``conf/profiles/*.yaml``): what the
    pipeline runs. Every key is stated in each profile, so none has a default."""

    profile: str = Field(min_length=1)
    models: list[str]
    strategies: list[str]
    condition: str
    provider: str
    mode: Literal["sync", "batch", "flex"]
    limit: int | None = Field(ge=1)
    finetuned: list[str]
    train_limit: int | None = Field(ge=1)
    derive_limit: int | None = Field(ge=1)
    adv_p_generator: str
    eval_limit: int | None = Field(ge=1)
    max_input_words: int | None = Field(ge=1)
    max_tokens: int | None = Field(ge=1)
    max_tokens_document: int | None = Field(ge=1)
    resamples: int = Field(ge=1, le=MAX_RESAMPLES)
    max_cost_usd: float | None = Field(ge=0, allow_inf_nan=False)
    max_requests: int | None = Field(ge=0)

    def summaries(self) -> list[str]:
        """The summary files (relative to the summaries folder) of the profile's configurations."""
        prompted = [f"runs/{m}-{s}.json" for m in self.models for s in self.strategies]
        return prompted + [f"finetuned/{m}.json" for m in self.finetuned]


class SweepFile(Settings):
    sweep: SweepProfile


@cache
def _params(path: str, text: str) -> tuple[Params, dict[str, Any]]:
    tree = read_yaml(path, text)
    return parse(Params, tree, path), tree


def load_params(path: str | Path = PARAMS_FILE) -> Params:
    """``params.yaml``, checked (parsed once per process and content)."""
    return _params(str(path), _text(path))[0]


def params_tree(path: str | Path = PARAMS_FILE) -> dict[str, Any]:
    """``params.yaml`` as the checked mapping, for the ``${params:...}`` resolver (a deep copy:
    a caller that changes it changes nothing another reads)."""
    return copy.deepcopy(_params(str(path), _text(path))[1])


def load_sweep(path: str | Path = SWEEP_FILE) -> SweepProfile:
    """A sweep profile, checked."""
    return parse(SweepFile, read_yaml(path), path).sweep


def dvc_stages(path: str | Path = DVC_FILE) -> dict[str, Any]:
    """``dvc.yaml``'s stages, as DVC reads them (templated; the planner resolves its own view)."""
    stages = read_yaml(path).get("stages")
    if not isinstance(stages, dict):
        raise ConfigError(f"{path}: stages: expected a mapping of stages")
    return stages


def config_default(dotted: str) -> Any:
    """A value of ``conf/config.yaml`` as written (``mlflow.experiment``, ``warn_rate``, the
    ``budget`` block): for the callers outside a Hydra composition (fine-tuning, evaluation,
    analysis, the rewriter), which read the prompted runs' one definition instead of a copy."""
    node: Any = read_yaml(conf_dir("config.yaml"))
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(f"{dotted!r} is not defined in {conf_dir('config.yaml')}")
        node = node[part]
    return node
