"""What the evaluation runner asks of a system, and how the system's outputs are scored.

A *system* (a prompted model under a strategy, a fine-tuned tagger) only turns the records of a
:class:`DatasetPlan` into :class:`~src.scoring.evaluate.InstanceOutput` rows (a
:class:`SystemOutput`); :class:`ScoringOptions` say how they are scored. The MLflow run around
it all is :mod:`src.tracking.evaluation`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from src.data.schema import Record
from src.scoring.evaluate import InstanceOutput


@dataclass
class DatasetPlan:
    """One (task, dataset) to evaluate: where it lives and which of its records to use."""

    task: str
    dataset: str
    path: Path
    records: list[Record]


@dataclass
class SystemOutput:
    """What a system produced for one dataset: outputs aligned with the records, or failures.

    ``failures`` maps instance ids to the real cause (a request that failed after its
    retries); a dataset with any failure is not scored (never a silent subset).
    """

    outputs: list[InstanceOutput] | None
    failures: dict[str, str] = field(default_factory=dict)
    usage: dict[str, float] = field(default_factory=dict)


class System(Protocol):
    """Anything that can answer the instances of a dataset.

    A system may also define ``prepare(plans)``, called once with every plan before the first
    ``produce``: a prompted system generates all of them there in one backend call, so its
    workers never idle at the end of one dataset while another is waiting.
    """

    def produce(self, plan: DatasetPlan) -> SystemOutput: ...


@dataclass
class ScoringOptions:
    """How outputs are scored: bootstrap size and seed, case folding, extra scorer variants."""

    resamples: int
    seed: int
    lowercase: bool
    variants: tuple[str, ...]
