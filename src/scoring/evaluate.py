"""Score one system's output on one dataset and log it with the project's MLflow conventions.

Prompted runs (``src.run``) and fine-tuned models (``src.finetune.evaluate``) both end
here, so their metrics, artifacts and bootstrap samples have the same names and shapes
and the analysis treats every configuration alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from src.data.schema import Record
from src.scoring.metrics import ScoreResult, score_pairs
from src.scoring.stats import bootstrap_f1, percentile_interval, resample_counts
from src.scoring.variants import score_variant
from src.study import PRIMARY_METRIC, PRIMARY_SCORER


@dataclass
class InstanceOutput:
    """What a system produced for one instance, before scoring."""

    predictions: list[Any]
    raw: str | None = None
    parse_ok: bool = True
    parse_error: str | None = None
    reasoning_steps: list[str] | None = None
    request_error: str | None = None
    truncated: bool = False  # the answer was cut by the token budget (finish reason ``length``)
    well_formed: bool = True  # strict JSON of exactly the requested shape (no repair needed)
    served: dict | None = None  # what the provider said served the answer (model, system_fingerprint, provider)
    refusal: str | None = None  # the model refused: its words (the answer has no spans)


@dataclass
class DatasetEvaluation:
    """Scores, bootstrap samples and per-instance rows of one (task, dataset)."""

    task: str
    dataset: str
    score: ScoreResult
    bootstrap_f1: np.ndarray
    ci95: tuple[float, float]
    parse_failure_rate: float
    rows: list[dict[str, Any]] = field(default_factory=list)
    resamples: int = 0
    seed: int = 0
    truncated_rate: float = 0.0
    well_formed_rate: float = 1.0
    variant_metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    variant_stats: dict[str, list] = field(default_factory=dict)

    def metrics(self) -> dict[str, float]:
        """Flat MLflow metrics named ``{task}.{dataset}.{metric}``."""
        prefix = f"{self.task}.{self.dataset}"
        summary = self.score.summary()
        out = {
            f"{prefix}.f1": summary[PRIMARY_METRIC]["f1"],
            f"{prefix}.precision": summary[PRIMARY_METRIC]["precision"],
            f"{prefix}.recall": summary[PRIMARY_METRIC]["recall"],
            f"{prefix}.strict_f1": summary["strict"]["f1"],
            f"{prefix}.relaxed_f1": summary["relaxed"]["f1"],
            f"{prefix}.f1_ci_low": self.ci95[0],
            f"{prefix}.f1_ci_high": self.ci95[1],
            f"{prefix}.parse_failure_rate": self.parse_failure_rate,
            f"{prefix}.truncated_rate": self.truncated_rate,
            f"{prefix}.well_formed_rate": self.well_formed_rate,
            f"{prefix}.n": float(summary["n"]),
            f"{prefix}.not_in_text": float(summary["predictions_not_in_text"]),
        }
        for name, value in summary["errors"].items():
            out[f"{prefix}.errors.{name}"] = float(value)
        for label, result in self.score.per_label.items():
            p, r, f = result.prf(PRIMARY_METRIC)
            out.update({f"{prefix}.{label}.f1": f, f"{prefix}.{label}.precision": p, f"{prefix}.{label}.recall": r})
        for variant, values in self.variant_metrics.items():
            out.update({f"{prefix}.{variant}.{name}": value for name, value in values.items()})
        return out

    def bootstrap_artifact(self) -> dict[str, Any]:
        """Per-instance sufficient statistics and the bootstrap F1 samples (for the analysis)."""
        return {
            "task": self.task,
            "dataset": self.dataset,
            "ids": self.score.ids,
            "columns": ["matched", "n_pred", "n_gold"],
            "stats": {metric: values.tolist() for metric, values in self.score.stats.items()},
            "errors": {name: values.tolist() for name, values in self.score.errors.items()},
            "per_label_stats": {
                label: result.stats[PRIMARY_METRIC].tolist() for label, result in self.score.per_label.items()
            },
            "resamples": self.resamples,
            "seed": self.seed,
            "bootstrap_f1": self.bootstrap_f1.round(6).tolist(),
            "ci95": list(self.ci95),
            "variant_columns": ["p_sum", "r_sum", "n_pred", "n_gold"],
            "variant_stats": self.variant_stats,
        }


def evaluate_dataset(
    task: str,
    dataset: str,
    records: Sequence[Record],
    outputs: Sequence[InstanceOutput],
    resamples: int,
    seed: int,
    lowercase: bool = False,
    variants: Sequence[str] = (),
) -> DatasetEvaluation:
    """Score ``outputs`` (aligned with ``records``) and bootstrap the LCS micro-F1.

    ``variants`` names extra scorers (``src.scoring.variants``) logged beside the primary
    metric, with their per-instance statistics in the bootstrap artifact.
    """
    if len(records) != len(outputs):
        raise ValueError(f"{task}/{dataset}: {len(records)} records but {len(outputs)} outputs")
    if not records:
        raise ValueError(f"{task}/{dataset}: no instances to score")
    score = score_pairs([(r, o.predictions) for r, o in zip(records, outputs)], lowercase=lowercase)
    samples = bootstrap_f1(score.stats[PRIMARY_METRIC], resample_counts(len(records), resamples, seed))
    low, high = percentile_interval(samples)
    failures = sum(1 for o in outputs if not o.parse_ok)
    variant_metrics, variant_stats = score_variants(
        [(r, o.predictions) for r, o in zip(records, outputs)], variants, lowercase
    )
    rows = [
        {
            "id": record.id,
            "gold": [s.to_dict() for s in record.spans],
            "predictions": output.predictions,
            "raw_output": output.raw,
            "parse_ok": output.parse_ok,
            "parse_error": output.parse_error,
            "reasoning_steps": output.reasoning_steps,
            "request_error": output.request_error,
            "truncated": output.truncated,
            "served": output.served,
            **({"refusal": output.refusal} if output.refusal is not None else {}),
        }
        for record, output in zip(records, outputs)
    ]
    return DatasetEvaluation(
        task,
        dataset,
        score,
        samples,
        (float(low), float(high)),
        failures / len(records),
        rows,
        resamples,
        seed,
        truncated_rate=sum(o.truncated for o in outputs) / len(records),
        well_formed_rate=sum(o.well_formed for o in outputs) / len(records),
        variant_metrics=variant_metrics,
        variant_stats=variant_stats,
    )


def score_variants(pairs, variants: Sequence[str], lowercase: bool) -> tuple[dict, dict]:
    """Precision, recall and F1 of each extra scorer variant, and its per-instance statistics."""
    if not variants:
        return {}, {}

    metrics, stats = {}, {}
    for variant in variants:
        if variant == PRIMARY_SCORER:
            continue
        scored = score_variant(pairs, variant, lowercase=lowercase)
        precision, recall, f1 = scored.prf()
        metrics[variant] = {"precision": float(precision), "recall": float(recall), "f1": float(f1)}
        stats[variant] = scored.stats.tolist()
    return metrics, stats
