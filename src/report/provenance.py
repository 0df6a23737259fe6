"""Which runs the analysis reads: exactly the ones the pipeline's summary files name.

Every configuration stage of the pipeline (``src.run``, ``src.finetune.evaluate``) writes a
small summary JSON (``summaries/**/*.json``) holding at least the ``key`` of the MLflow run it
logged (:mod:`src.tracking.keys`: a digest of its configuration, code and data, carried by the
run as a tag). The analysis reads those runs (their evidence folders, else the store's newest
FINISHED run with that key) and nothing else, so a run logged by hand, an old profile's run or
a failed retry never reaches a report. Anything that would
make the binding ambiguous stops the analysis with a one-line error naming the summary
file: a run that is missing, not FINISHED, deleted, from another experiment or not a
configuration run; two FINISHED runs with the summary's key but different metrics (naming
both); a run whose metrics are not the summary's; two summaries naming the same run or
configuration; or runs that disagree on the data version (see :func:`check_data_versions`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from src.study import RUN_KINDS
from src.tracking.evidence import clean_metrics
from src.tracking.history import read_history
from src.tracking.keys import KEY_TAG

DIRTY_SUFFIX = "-dirty"


@dataclass(frozen=True)
class Summary:
    """One pipeline summary file.

    Attributes:
        path: the file as found.
        name: its path relative to the summaries folder (POSIX), as reports show it.
        key: the key of the run it names (:mod:`src.tracking.keys`).
        model, strategy, run_name: what the summary says the run is (checked against the run).
        complete: ``False`` when the stage recorded unscored datasets.
        usage: the run's requests, tokens and cost (sent apart from cached), from the stage's history
            file where this machine ran it and it is of this run (:mod:`src.tracking.history`).
        metrics: the headline metrics the stage wrote (``{task: {dataset: {name: value}}}``, rounded
            to 6 decimals), which the run read must have.
    """

    path: Path
    name: str
    key: str
    model: str | None = None
    strategy: str | None = None
    complete: bool | None = None
    run_name: str | None = None
    usage: dict[str, float] | None = None
    metrics: dict[str, float] | None = None


def read_summaries(directory: Path, expected: Sequence[str] | None = None) -> list[Summary]:
    """Every ``**/*.json`` under ``directory`` (sorted by path), each naming a distinct run.

    ``expected`` (paths relative to ``directory``) restricts the analysis to exactly those
    summaries, e.g. the configurations of the active sweep, so that a summary left behind by
    another profile never enters the report; each must exist.

    Raises:
        ValueError: the folder is missing or empty, a file is not a summary, or two files name one run.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ValueError(
            f"summaries folder {directory} does not exist (run the pipeline first, or pass --summaries DIR)"
        )
    if expected is not None:
        files = sorted(directory / name for name in expected)
        absent = [str(path) for path in files if not path.is_file()]
        if absent:
            raise ValueError(f"summary file(s) of the sweep not found: {', '.join(absent)} (run `dvc repro`)")
    else:
        files = sorted(path for path in directory.glob("**/*.json") if path.is_file())
    if not files:
        raise ValueError(f"summaries folder {directory} holds no summary file (**/*.json)")
    out, seen = [], {}
    for path in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"{path}: not a JSON summary ({error})") from None
        key = data.get("key") if isinstance(data, dict) else None
        if not isinstance(key, str) or not key.strip():
            raise ValueError(f"{path}: no 'key' (a summary names the run of one configuration by its key)")
        key = key.strip()
        if key in seen:
            raise ValueError(f"{path}: names run {key}, as {seen[key]} does (one summary per run)")
        seen[key] = path
        complete = data.get("complete")
        out.append(
            Summary(
                path,
                path.relative_to(directory).as_posix(),
                key,
                _text(data.get("model")),
                _text(data.get("strategy")),
                complete if isinstance(complete, bool) else None,
                _text(data.get("run_name")),
                _usage(read_history(path, key).get("usage")),
                _summary_metrics(data.get("metrics")),
            )
        )
    return out


def _usage(value: Any) -> dict[str, float] | None:
    """A summary's ``usage`` block: its numeric fields, or None where it has none."""
    if not isinstance(value, dict):
        return None
    return {
        str(k): float(v) for k, v in value.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
    } or None


def _summary_metrics(block: Any) -> dict[str, float] | None:
    """A summary's ``metrics`` block flattened to the run's metric names (``timex.base.f1``)."""
    if not isinstance(block, dict):
        return None
    flat = {}
    for task, datasets in block.items():
        for dataset, values in (datasets or {}).items() if isinstance(datasets, dict) else ():
            for name, value in (values or {}).items() if isinstance(values, dict) else ():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    flat[f"{task}.{dataset}.{name}"] = float(value)
    return flat or None


def check_summary_metrics(summary: Summary, metrics: Mapping[str, float], run: str) -> None:
    """The run read must have the metrics its summary wrote (rounded as the summary rounds them).

    Raises:
        ValueError: one line naming the summary, the run and the first metric that differs.
    """
    for name, stated in sorted((summary.metrics or {}).items()):
        logged = metrics.get(name)
        if logged is None or round(float(logged), 6) != stated:
            raise ValueError(
                f"{summary.path} says {name} = {stated}, but run {run} (key {summary.key}) has "
                f"{'none' if logged is None else logged}: the run is not the one the stage wrote"
            )


def check_same_metrics(summary: Summary, runs: Sequence) -> None:
    """FINISHED runs with one key computed the same thing, so they must agree on every metric that
    depends only on code, data and seed; two that do not are an error naming both."""
    first = runs[0]
    reference = clean_metrics(first.data.metrics)
    for other in runs[1:]:
        theirs = clean_metrics(other.data.metrics)
        if theirs != reference:
            differ = sorted(k for k in set(reference) | set(theirs) if reference.get(k) != theirs.get(k))
            raise ValueError(
                f"{summary.path}: runs {first.info.run_id} and {other.info.run_id} both have key {summary.key} "
                f"but different metrics ({differ[0]}: {reference.get(differ[0])} vs {theirs.get(differ[0])}"
                f"{f', {len(differ) - 1} more' if len(differ) > 1 else ''}): a setting the key misses, "
                "or a run logged by hand; delete the wrong run"
            )


def metrics_usage(metrics: dict[str, float]) -> dict[str, float] | None:
    """A run's usage read from its MLflow metrics (a hand-run report has no summaries): the run
    totals (``usage.*``), else the per-dataset ``<task>.<dataset>.usage.*`` summed; None if none."""
    totals = {
        name[len("usage.") :]: value
        for name, value in metrics.items()
        if name.startswith("usage.") and name != "usage.plan_ceiling_cost_usd"
    }
    if not totals:
        for name, value in metrics.items():
            field = name.partition(".usage.")[2]
            if field:
                totals[field] = totals.get(field, 0.0) + float(value)
    totals.pop("latency_s", None)
    return {name: float(value) for name, value in totals.items()} or None


def sweep_usage(summaries: Sequence[Summary]) -> dict[str, float]:
    """Every field of the summaries' usage summed, plus ``runs``: how many reported usage (empty if none)."""
    return total_of_usages([s.usage for s in summaries])


def rewriting_usage(folder: Path | str) -> dict[str, float]:
    """What the paid rewriting stages sent and spent (``adv_p`` with an API generator: each writes
    ``history/derive/<task>/adv_p.json``, :func:`src.derive.rewrite_billing.write_usage`), summed as
    :func:`total_of_usages` sums runs (``runs``: how many stages reported); empty if none did. An
    unreadable file is a ValueError naming it (the spend it held must not vanish silently)."""
    usages = []
    for path in sorted(Path(folder).glob("*/*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"{path}: not a JSON history file of a rewriting stage ({error})") from None
        usages.append(_usage(data.get("usage") if isinstance(data, dict) else None))
    return total_of_usages(usages)


def total_of_usages(usages: Sequence[dict[str, float] | None]) -> dict[str, float]:
    """Every field of the runs' usage summed, plus ``runs``: how many reported usage (empty if none)."""
    reported = [usage for usage in usages if usage]
    total: dict[str, float] = {}
    for usage in reported:
        for name, value in usage.items():
            total[name] = total.get(name, 0.0) + value
    if reported:
        total["runs"] = float(len(reported))
    return {name: round(value, 6) for name, value in sorted(total.items())}


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def run_name(run) -> str:
    return run.info.run_name or run.data.tags.get("mlflow.runName") or run.info.run_id


def _field(run, name: str) -> str | None:
    value = run.data.params.get(name, run.data.tags.get(name))
    return None if value in (None, "", "None") else str(value)


def fetch_runs(client, summaries: Sequence[Summary], experiment_id: str, experiment_name: str) -> list:
    """The run each summary names (the newest FINISHED run of the experiment with its key; the same
    key means the same configuration, code and data), checked; returned in the summaries' order.

    Raises:
        ValueError: one line naming the summary file, for the first summary whose run cannot be used.
    """
    from mlflow.exceptions import MlflowException

    runs = []
    for summary in summaries:
        where = f"{summary.path}: run {summary.key}"
        try:
            found = client.search_runs(
                [experiment_id],
                filter_string=f"tags.`{KEY_TAG}` = '{summary.key}'",
                order_by=["attributes.start_time DESC"],
            )
        except MlflowException as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise ValueError(f"{where} could not be read: {first}") from None
        if not found:
            raise ValueError(
                f"{where} not found in experiment {experiment_name!r} of the tracking store "
                "(pass --evidence, or `python -m src.evidence restore` the pulled runs)"
            )
        finished = [run for run in found if run.info.status == "FINISHED"]
        run = finished[0] if finished else found[0]
        name = run_name(run)
        where = f"{where} ({name})"
        if run.info.status != "FINISHED":
            raise ValueError(f"{where} is {run.info.status}, not FINISHED")
        kind = run.data.tags.get("kind")
        if kind not in RUN_KINDS:
            raise ValueError(f"{where} is not a configuration run (its `kind` tag is {kind!r}, not one of {RUN_KINDS})")
        if summary.complete is False:
            raise ValueError(f"{where}: the summary says the configuration is incomplete")
        stated_fields = (("model", summary.model), ("strategy", summary.strategy), ("run name", summary.run_name))
        for field_name, stated in stated_fields:
            logged = name if field_name == "run name" else _field(run, field_name)
            if stated is not None and logged is not None and stated != logged:
                raise ValueError(f"{where}: the summary says {field_name} {stated!r}, the run logged {logged!r}")
        check_same_metrics(summary, finished)
        check_summary_metrics(summary, run.data.metrics, run.info.run_id)
        runs.append(run)
    check_unique_configurations(summaries, runs)
    return runs


def check_unique_configurations(summaries: Sequence[Summary], runs: Sequence) -> None:
    """Two summaries must not name runs of one configuration (same run name, or same model and strategy)."""
    seen: dict[Any, Summary] = {}
    for summary, run in zip(summaries, runs):
        name = run_name(run)
        model, strategy = _field(run, "model"), _field(run, "strategy")
        keys = [("name", name)] + ([("config", model, strategy)] if model and strategy else [])
        for key in keys:
            if key in seen:
                other = seen[key]
                raise ValueError(
                    f"{summary.path} and {other.path} both name configuration {name} "
                    f"(runs {summary.key} and {other.key}); remove the stale summary"
                )
        for key in keys:
            seen[key] = summary


def split_data_version(value: str | None) -> tuple[str | None, str | None]:
    """``raw:<corpora>/datasets:<files>`` -> (``raw:<corpora>``, ``datasets:<files>``); None for what is absent."""
    if value is None or str(value) in ("", "None", "unknown"):
        return None, None
    raw, _, files = str(value).partition("/")
    return (raw if raw.startswith("raw:") and raw != "raw:unknown" else None), (files or None)


def check_data_versions(rows: Sequence[Mapping[str, Any]], scored: Mapping[str, Iterable[str]]) -> None:
    """Runs must agree on the data they were scored on, as far as ``data_version`` can tell.

    A run's ``data_version`` (``src.tracking.store.data_version``) is the raw corpora's DVC hash
    plus one digest over all the dataset files the run read together. So: every run must
    have the same raw part, and runs scored on exactly the same ``task/dataset`` keys must
    have the same digest. Runs scored on different sets of datasets cannot be compared
    dataset by dataset.

    Args:
        rows: run rows with ``config``, ``data_version`` and ``summary``.
        scored: configuration -> the ``task/dataset`` keys it was scored on.

    Raises:
        ValueError: the first disagreement, naming both configurations and their summaries.
    """
    first_raw: Mapping[str, Any] | None = None
    files_seen: dict[frozenset, Mapping[str, Any]] = {}
    for row in rows:
        raw, files = split_data_version(row.get("data_version"))
        if raw is not None and first_raw is None:
            first_raw = row
        elif raw is not None and split_data_version(first_raw.get("data_version"))[0] != raw:
            raise ValueError(
                f"runs disagree on the raw data version: {_who(first_raw)} has {first_raw['data_version']}, "
                f"{_who(row)} has {row['data_version']}"
            )
        keys = frozenset(scored.get(row["config"], ()))
        if files is None or not keys:
            continue
        other = files_seen.setdefault(keys, row)
        if other is not row and split_data_version(other.get("data_version"))[1] != files:
            listed = ", ".join(sorted(keys))
            raise ValueError(
                f"runs scored on the same datasets ({listed}) disagree on their data version: "
                f"{_who(other)} has {other['data_version']}, {_who(row)} has {row['data_version']}"
            )


def _who(row: Mapping[str, Any]) -> str:
    return f"{row['config']} ({row.get('summary') or row.get('run_id')})"


def is_dirty(commit: Any) -> bool:
    """A commit recorded from a working tree with uncommitted changes."""
    return isinstance(commit, str) and commit.endswith(DIRTY_SUFFIX)
