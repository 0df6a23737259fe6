"""A two-line system with a known F1 and three records, for tests that run the project's own runner."""

from __future__ import annotations

import mlflow

from src.scoring.evaluate import InstanceOutput
from src.scoring.system import DatasetPlan, SystemOutput
from tests.helpers.records import make_record

RECORDS = [
    make_record("d1#s0", "It rained on Friday.", ["Friday"]),
    make_record("d1#s1", "We left in May and June.", ["May", "June"]),
    make_record("d2#s0", "Nothing here.", []),
]


class EchoSystem:
    """Predicts the first gold span of each record (a known F1), logs an answer-record metric as
    src/runs/answers.py does, and names the served model."""

    def produce(self, plan: DatasetPlan) -> SystemOutput:
        mlflow.log_metric(f"{plan.task}.{plan.dataset}.empty_answer_rate", 0.25)
        outputs = [
            InstanceOutput([r.spans[0].to_dict()] if r.spans else [], raw="x", served={"model": "m-served"})
            for r in plan.records
        ]
        return SystemOutput(outputs, {}, {"requests": 3.0, "cached": 1.0, "cost": 0.5, "latency_s": 2.0})
