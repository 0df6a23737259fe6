"""The scorer registry: which scorers exist, their report titles and their metric names.

A scorer reduces each instance to four sufficient statistics ``(p_sum, r_sum, n_pred,
n_gold)`` (:data:`STAT_COLUMNS`): micro precision ``sum(p_sum) / sum(n_pred)``, recall
``sum(r_sum) / sum(n_gold)``, F1 their harmonic mean. That is all the runner, the
bootstrap and the report need, so a scorer is either

* a point of the built-in grid, a ``unit`` x ``matching`` pair computed in bulk by
  ``src.scoring.variants`` (the paper's metric and the released scorer's four variants,
  registered below), or
* one function registered with :func:`register_scorer` that returns an instance's four
  statistics; put it in ``src/scoring/custom_scorers.py`` (imported by the scoring code,
  so its scorers are known wherever scoring runs) and name it in ``scoring.variants``.

The registry's order is the report's column order: the grid first, then registered
functions in the order they were registered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from src.study import PRIMARY_METRIC_LABEL, PRIMARY_SCORER

if TYPE_CHECKING:
    from src.data.schema import Record
    from src.scoring.metrics import PredictedSpan

STAT_COLUMNS = ("p_sum", "r_sum", "n_pred", "n_gold")
UNITS = ("words", "tokens", "chars")
MATCHINGS = ("joint", "separate", "best_of")

#: ``(gold record, its predictions, lowercase) -> (p_sum, r_sum, n_pred, n_gold)``.
InstanceScorer = Callable[["Record", "Sequence[PredictedSpan]", bool], Sequence[float]]


@dataclass(frozen=True)
class VariantSpec:
    """One scorer.

    Attributes:
        name: registry key, used in metric names (``{task}.{dataset}.{name}.f1``).
        title: short report column header.
        description: one line for reports and ``--help``.
        unit: grid scorers only: ``"words"`` (the paper's regex words and subsequence LCS
            over ``max(|p|, |g|)``), ``"tokens"`` (lower-cased whitespace tokens) or
            ``"chars"`` (lower-cased characters); the latter two use the longest common
            contiguous run.
        matching: grid scorers only: ``"joint"`` (one Hungarian for P and R; the paper's),
            ``"separate"`` (one Hungarian on ``run/|p|`` for P, another on ``run/|g|`` for
            R) or ``"best_of"`` (each side's best partner, not one-to-one).
        primary: the project's headline metric (metric names without the scorer name).
        instance_stats: a registered function's scorer (``unit`` and ``matching`` None).
    """

    name: str
    title: str
    description: str
    unit: str | None = None
    matching: str | None = None
    primary: bool = False
    instance_stats: InstanceScorer | None = None

    def __post_init__(self) -> None:
        if self.instance_stats is not None:
            if self.unit is not None or self.matching is not None:
                raise ValueError(f"scorer {self.name!r}: a function scorer has no unit or matching")
            return
        if self.unit not in UNITS:
            raise ValueError(f"variant {self.name!r}: unit must be one of {UNITS}, got {self.unit!r}")
        if self.matching not in MATCHINGS:
            raise ValueError(f"variant {self.name!r}: matching must be one of {MATCHINGS}, got {self.matching!r}")
        if (self.unit == "words") != (self.matching == "joint"):
            raise ValueError(f"variant {self.name!r}: 'words' goes with 'joint' matching only (the paper's metric)")


_REGISTERED: dict[str, VariantSpec] = {}
#: Every scorer by name, in report order (a read-only view of the registry).
VARIANTS: Mapping[str, VariantSpec] = MappingProxyType(_REGISTERED)


def register_variant(spec: VariantSpec) -> VariantSpec:
    """Add ``spec`` to the registry; a name can be registered once."""
    if spec.name in _REGISTERED:
        raise ValueError(f"scorer {spec.name!r} is already registered")
    if spec.primary and any(other.primary for other in _REGISTERED.values()):
        raise ValueError(f"scorer {spec.name!r}: there is one primary scorer ({PRIMARY_SCORER!r})")
    _REGISTERED[spec.name] = spec
    return spec


def register_scorer(name: str, title: str, description: str) -> Callable[[InstanceScorer], InstanceScorer]:
    """Register the decorated function as the scorer ``name``.

    The function takes ``(record, predictions, lowercase)`` (predictions as
    ``src.scoring.metrics.PredictedSpan``) and returns the instance's
    ``(p_sum, r_sum, n_pred, n_gold)``; it is returned unchanged.
    """

    def decorate(function: InstanceScorer) -> InstanceScorer:
        register_variant(VariantSpec(name, title, description, instance_stats=function))
        return function

    return decorate


def unregister_scorer(name: str) -> None:
    """Remove a registered function's scorer (the built-in grid stays)."""
    spec = get_variant(name)
    if spec.instance_stats is None:
        raise ValueError(f"scorer {name!r} is part of the built-in grid and cannot be removed")
    del _REGISTERED[name]


def get_variant(variant: str | VariantSpec) -> VariantSpec:
    """The spec of ``variant`` (a name of :data:`VARIANTS` or a spec, returned as is).

    Raises:
        KeyError: an unknown name (the message lists the known ones).
    """
    if isinstance(variant, VariantSpec):
        return variant
    try:
        return VARIANTS[variant]
    except KeyError:
        raise KeyError(f"unknown scorer variant {variant!r}; known: {', '.join(VARIANTS)}") from None


for _spec in (
    VariantSpec(
        PRIMARY_SCORER,
        PRIMARY_METRIC_LABEL,
        "paper's formula: word LCS / max length, one Hungarian matching for P and R",
        "words",
        "joint",
        primary=True,
    ),
    VariantSpec(
        "released",
        "released token 1:1",
        "released scorer: lower-cased whitespace tokens, longest common run, separate P and R Hungarians",
        "tokens",
        "separate",
    ),
    VariantSpec(
        "released_best",
        "released token best-of",
        "released scorer: lower-cased whitespace tokens, longest common run, best partner per span",
        "tokens",
        "best_of",
    ),
    VariantSpec(
        "released_char",
        "released char 1:1",
        "released scorer: lower-cased characters, longest common substring, separate P and R Hungarians",
        "chars",
        "separate",
    ),
    VariantSpec(
        "released_char_best",
        "released char best-of",
        "released scorer: lower-cased characters, longest common substring, best partner per span",
        "chars",
        "best_of",
    ),
):
    register_variant(_spec)
del _spec


# --- metric names and report columns ---------------------------------------------------------


def metric_prefix(task: str, dataset: str, variant: str | VariantSpec) -> str:
    """``{task}.{dataset}`` for the primary variant, ``{task}.{dataset}.{variant}`` otherwise."""
    spec = get_variant(variant)
    return f"{task}.{dataset}" if spec.primary else f"{task}.{dataset}.{spec.name}"


def metric_names(task: str, dataset: str, variant: str | VariantSpec) -> dict[str, str]:
    """MLflow metric names of a variant: ``{"f1": ..., "precision": ..., "recall": ...}``."""
    prefix = metric_prefix(task, dataset, variant)
    return {stat: f"{prefix}.{stat}" for stat in ("f1", "precision", "recall")}


def report_columns(variants: Iterable[str | VariantSpec] | None = None) -> list[tuple[str, str]]:
    """(name, title) of each variant in registry order: the report's F1 columns."""
    specs = [get_variant(v) for v in (VARIANTS.values() if variants is None else variants)]
    return [(spec.name, spec.title) for spec in specs]
