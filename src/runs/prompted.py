"""A model under a reasoning strategy as a system the evaluation runner scores.

It builds each record's request (the strategy's prompt parts, the generation budget), generates
every dataset in one cached backend call, counts what was sent and spent
(:mod:`src.runs.usage`), logs per dataset what the answers were (:mod:`src.runs.answers`)
and parses them. A refusal is the model's answer: no spans, not a parse failure, counted as
``refusal_rate``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from src import study
from src.backends.base import GenerationResult
from src.backends.cache import cache_key
from src.billing.earlier import EarlierAttempts
from src.billing.meter import Meter
from src.config.schema import Generation, RunConfig
from src.core.requests import ChatRequest
from src.data.schema import Record, read_records
from src.prompts import PromptOptions, Strategy, build_request_parts, select_exemplars
from src.prompts.parsing import parse_answer
from src.runs.answers import log_answer_record
from src.runs.usage import dataset_usage, local_bill
from src.scoring.evaluate import InstanceOutput
from src.scoring.system import DatasetPlan, SystemOutput

log = logging.getLogger(__name__)

TRAIN_SPLIT = "train"
REFUSAL_ERROR = "refusal"


def select_exemplars_for(config: RunConfig, strategy: Strategy, task: str) -> list[Record]:
    """The inductive exemplars of a task, drawn from its train split with the run's seed."""
    if not strategy.inductive:
        return []
    train = read_records(Path(config.paths.prepared) / task / f"{TRAIN_SPLIT}.jsonl")
    return select_exemplars(train, strategy.k, config.seed, task)


def generation_budget(generation: Generation, strategy: Strategy, dataset: str) -> int:
    """Max new tokens: the explicit override, else the strategy's budget (both larger for
    documents), plus ``generation.max_tokens_reasoning`` for an abductive answer's steps."""
    reasoning = (generation.max_tokens_reasoning or 0) if strategy.abductive else 0
    if dataset in study.DOCUMENT_DATASETS:
        override = generation.max_tokens_document
        return (strategy.max_tokens_document if override is None else override) + reasoning
    override = generation.max_tokens
    return (strategy.max_tokens if override is None else override) + reasoning


def request_key(backend: Any, request: ChatRequest) -> str | None:
    """The response-cache key of a deterministic request (identical prompts share it); None for
    a sampled one, which is sent every time."""

    return cache_key(backend.key_fields(request)) if request.deterministic else None


class PromptedSystem:
    """A model under a strategy: prompts each record, generates (cached), parses the answers.

    ``meter`` prices and caps what the backend sends (:mod:`src.billing.meter`); an HTTP backend
    shares it, a local one's answers are added to it as they land. ``strategy`` defaults to the
    configuration's (``python -m src.tune_k`` tries others).
    """

    def __init__(self, config: RunConfig, backend, meter: Meter, strategy: Strategy | None = None) -> None:
        self.config = config
        self.backend = backend
        self.strategy = strategy or config.strategy
        self.options: PromptOptions = config.prompt
        self.price = config.model.price  # for answers whose provider reports no cost
        self.meter = meter
        backend.attach_meter(self.meter)
        self._exemplars: dict[str, list[Record]] = {}
        self._prepared: dict[tuple[str, str], list] = {}
        self._counted: set[str] = set()  # cache keys already in a dataset's usage: identical prompts count once
        self._billed: set[str] = set()  # cache keys of local answers already added to the meter
        self._served_models: set[str] = set()  # the models the provider named, over the run
        self.answer_rates: dict[str, dict[str, float]] = {}  # task/dataset -> empty / refusal / mismatch shares
        # what earlier, interrupted processes of this run were billed, by request (set by the run)
        self.earlier: EarlierAttempts | None = None

    def exemplars(self, task: str) -> list[Record]:
        if task not in self._exemplars:
            self._exemplars[task] = select_exemplars_for(self.config, self.strategy, task)
        return self._exemplars[task]

    def requests(self, plan: DatasetPlan) -> list[ChatRequest]:
        max_tokens = generation_budget(self.config.generation, self.strategy, plan.dataset)
        requests = []
        for record in plan.records:
            parts = build_request_parts(self.strategy, plan.task, record.text, self.exemplars(plan.task), self.options)
            requests.append(
                ChatRequest(
                    messages=parts.messages,
                    max_tokens=int(max_tokens),
                    temperature=self.config.generation.temperature,
                    seed=self.config.generation.seed,
                    request_id=record.id,
                    response_schema=parts.response_schema,
                    completion=parts.completion,
                    stop_at_repeat=parts.stop_at_repeat,
                )
            )
        return requests

    def prepare(self, plans: list[DatasetPlan]) -> None:
        """Generate every dataset's requests in one backend call, kept for :meth:`produce`: the
        local workers then never wait at the end of one dataset (the same answers, in any order)."""
        batches = [self.requests(plan) for plan in plans]
        results = self.backend.generate(
            [request for batch in batches for request in batch],
            progress=f"{self.strategy.name}: {len(plans)} datasets",
            on_result=self._bill,
        )
        self._log_endpoint_behaviour()
        start = 0
        for plan, batch in zip(plans, batches):
            self._prepared[(plan.task, plan.dataset)] = results[start : start + len(batch)]
            start += len(batch)

    def _log_endpoint_behaviour(self) -> None:
        """What the HTTP backend settled on while answering: the structured-output form it used
        (``schema_format: auto``) and how its adaptive concurrency moved (inside the MLflow run)."""
        import mlflow

        if self.backend.schema_form_used is not None:
            mlflow.log_param("schema_form_used", self.backend.schema_form_used)
        stats = self.backend.concurrency_stats
        if stats is not None:
            mlflow.log_metrics({k: float(v) for k, v in stats.as_dict().items()})

    def _bill(self, index: int, result: GenerationResult) -> None:
        """Add a local engine's newly generated answer to the meter the moment it lands (an HTTP
        backend's meter counted every attempt itself); hits and identical prompts are not billed."""
        if result.cached or result.bill is not None or result.attempts == 0:
            return
        key = request_key(self.backend, result.request)
        if key is not None:
            if key in self._billed:
                return
            self._billed.add(key)
        bill = local_bill(result, self.price) if result.text is not None else None
        self.meter.add_local(bill, int(result.attempts or 1))

    def usage(self, results: list[GenerationResult]) -> dict[str, float]:
        """A dataset's usage (:func:`src.runs.usage.dataset_usage`), the earlier processes'
        attempts of a resumed run counted at their bill."""
        return dataset_usage(
            results,
            self.price,
            self._counted,
            lambda request: request_key(self.backend, request),
            None if self.earlier is None else self.earlier.take,
        )

    def produce(self, plan: DatasetPlan) -> SystemOutput:

        results = self._prepared.pop((plan.task, plan.dataset), None)
        if results is None:
            results = self.backend.generate(
                self.requests(plan), progress=f"{plan.task}/{plan.dataset}", on_result=self._bill
            )
        usage = self.usage(results)
        failures = {r.request.request_id: (r.error or "no answer") for r in results if r.text is None}
        rates = log_answer_record(
            plan.task, plan.dataset, results, self.backend.model_id, self._served_models, self.backend.routing
        )
        self.answer_rates[f"{plan.task}/{plan.dataset}"] = rates
        if failures:
            return SystemOutput(None, failures, usage)
        outputs = []
        for result in results:
            if result.refusal is not None:
                outputs.append(refusal_output(result))
                continue
            parsed = parse_answer(
                result.text,
                plan.task,
                self.strategy.abductive,
                answer_format=self.options.answer_format,
                prompt_form=self.options.form,
            )
            outputs.append(
                InstanceOutput(
                    parsed.predictions,
                    result.text,
                    parsed.ok,
                    parsed.error,
                    parsed.reasoning_steps,
                    truncated=result.finish_reason == "length",
                    well_formed=parsed.well_formed,
                    served=result.served or None,
                )
            )
        return SystemOutput(outputs, {}, usage)


def refusal_output(result: GenerationResult) -> InstanceOutput:
    """A refusal scored as the model's answer: no spans (every gold span missed), parsed fine."""
    return InstanceOutput(
        [],
        result.text,
        True,
        None,
        None,
        truncated=False,
        well_formed=False,
        served=result.served or None,
        refusal=result.refusal,
    )
