"""A run's closing lines (not a comparison's verdict, :mod:`src.scoring.calibrated`): one line per task/dataset, and a warning block for answers not to trust.

A run can finish with an F1 that hides many parse failures, truncated answers, empty answers,
refusals or answers served by another model or provider. The closing lines name each dataset where one of those shares
exceeds ``warn_rate`` (conf/config.yaml, default 5%), so the reader sees it at the end of the log.
"""

from __future__ import annotations

from collections.abc import Mapping

#: (metric, what the warning calls it), in the order the warning lists them.
WATCHED = (
    ("parse_failure_rate", "parse failures"),
    ("truncated_rate", "truncated answers"),
    ("empty_answer_rate", "empty answers"),
    ("refusal_rate", "refusals"),
    ("served_model_mismatch_rate", "served-model mismatches"),
    ("served_provider_mismatch_rate", "served-provider mismatches"),
)


def dataset_line(key: str, metrics: Mapping[str, float] | None, instances: int, failed: int) -> str:
    """``timex/base: F1 0.453 (40 instances)``, or why the dataset was not scored."""
    if metrics is None or "f1" not in metrics:
        return f"{key}: not scored ({failed} of {instances} requests failed)"
    return f"{key}: F1 {metrics['f1']:.3f} ({instances} instance{'' if instances == 1 else 's'})"


def warnings(rates: Mapping[str, Mapping[str, float]], threshold: float) -> list[str]:
    """One line per watched share that exceeds ``threshold`` somewhere, naming the datasets."""
    lines = []
    for metric, label in WATCHED:
        over = [(key, values[metric]) for key, values in rates.items() if values.get(metric, 0.0) > threshold]
        if over:
            cells = ", ".join(f"{key} {value:.1%}" for key, value in over)
            lines.append(f"  {label} above {threshold:.0%}: {cells}")
    return lines


def closing_lines(
    scored: Mapping[str, Mapping[str, float] | None],
    instances: Mapping[str, int],
    failed: Mapping[str, int],
    rates: Mapping[str, Mapping[str, float]],
    threshold: float,
) -> tuple[list[str], list[str]]:
    """(summary lines, warning lines) for the datasets of a run, in the run's order.

    ``scored`` maps ``task/dataset`` to its metrics by short name (``f1``...) or None when it was
    not scored; ``rates`` to every watched share known for it (scored or not).
    """
    summary = [dataset_line(key, metrics, instances.get(key, 0), failed.get(key, 0)) for key, metrics in scored.items()]
    block = warnings(rates, threshold)
    if block:
        block.insert(0, f"warning: answers not to trust (warn_rate {threshold:g}); check these datasets:")
    return summary, block


def run_closing_lines(
    outcome, answer_rates: Mapping[str, Mapping[str, float]], threshold: float
) -> tuple[list[str], list[str]]:
    """:func:`closing_lines` of a :class:`~src.tracking.evaluation.RunOutcome`; ``answer_rates`` holds each
    dataset's empty-answer and served-model mismatch shares (:mod:`src.runs.answers`)."""
    everything = outcome.metrics()
    scored, instances, failed, rates = {}, {}, {}, {}
    for o in outcome.outcomes:
        prefix = f"{o.plan.task}.{o.plan.dataset}."
        short = {name[len(prefix) :]: value for name, value in everything.items() if name.startswith(prefix)}
        scored[o.key] = short if o.evaluation is not None else None
        instances[o.key] = len(o.plan.records)
        failed[o.key] = len(o.failures)
        rates[o.key] = {**short, **answer_rates.get(o.key, {})}
    return closing_lines(scored, instances, failed, rates, threshold)
