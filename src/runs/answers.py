"""Per dataset of a run: how many answers were empty or refusals, and who served them.

A provider may route to a fallback model or provider, answer with nothing, or the model may
refuse; each is kept with its answer (:class:`~src.backends.base.GenerationResult`) and logged
here into the open MLflow run:

* metrics ``{task}.{dataset}.empty_answer_rate`` (answers that are blank after the backend's
  retries, i.e. the model's own empty answers), ``{task}.{dataset}.refusal_rate`` (answers
  that are a refusal), ``{task}.{dataset}.served_model_mismatch_rate`` (answers whose served
  model is another model under :func:`src.backends.served.same_model`) and
  ``{task}.{dataset}.served_provider_mismatch_rate`` (answers from a provider outside the
  pinned routing, :mod:`src.backends.routing`);
* tag ``served_models``: the distinct models the provider named, over every dataset so far;
* artifact ``served/{task}/{dataset}.json``: per instance, the served record, finish reason,
  whether it was empty or a refusal and whether it came from the cache.
"""

from __future__ import annotations

from collections.abc import Sequence

from src.backends.base import GenerationResult
from src.backends.routing import provider_mismatch
from src.backends.served import is_mismatch
from src.tracking import store as tracking


def answer_metrics(
    results: Sequence[GenerationResult], requested_model: str, routing: dict | None = None
) -> dict[str, float]:
    """The empty-answer, refusal and served-mismatch shares over all ``results``."""
    answered = [result for result in results if result.ok]
    total = len(results) or 1
    metrics = {
        "empty_answer_rate": sum(result.empty for result in answered) / total,
        "refusal_rate": sum(result.refusal is not None for result in answered) / total,
        "served_model_mismatch_rate": sum(is_mismatch(requested_model, result.served) for result in answered) / total,
    }
    if routing:
        metrics["served_provider_mismatch_rate"] = (
            sum(provider_mismatch(routing, result.served) for result in answered) / total
        )
    return metrics


def served_by_instance(results: Sequence[GenerationResult]) -> dict[str, dict]:
    """Instance id -> what served its answer, for the run's artifact."""
    return {
        result.request.request_id: {
            "served": dict(result.served),
            "finish_reason": result.finish_reason,
            "empty": result.empty,
            "cached": result.cached,
            **({"refusal": result.refusal} if result.refusal is not None else {}),
        }
        for result in results
        if result.ok
    }


def log_answer_record(
    task: str,
    dataset: str,
    results: Sequence[GenerationResult],
    requested_model: str,
    served_models: set[str],
    routing: dict | None = None,
) -> dict[str, float]:
    """Log the dataset's answer metrics, the run's ``served_models`` tag and the per-instance
    artifact into the active MLflow run (none open: nothing is logged); ``served_models``
    accumulates across datasets."""
    import mlflow

    metrics = answer_metrics(results, requested_model, routing)
    if mlflow.active_run() is None:  # e.g. tune_k scores without a run: nothing to log into
        return metrics
    mlflow.log_metrics({f"{task}.{dataset}.{name}": value for name, value in metrics.items()})
    served_models.update(result.served["model"] for result in results if result.ok and result.served.get("model"))
    if served_models:
        mlflow.set_tag("served_models", ",".join(sorted(served_models)))
    tracking.log_json_artifact(served_by_instance(results), f"served/{task}/{dataset}.json")
    return metrics
