"""The study's vocabulary: tasks and their labels, splits, datasets and their dimensions,
strategies and metric names.

Every other module (data preparation, prompts, parsing, fine-tuning, the runner, the
analysis) and the Hydra ``dimension`` configs read these facts from here; a test checks
the configs against them. Adding a dataset is one :data:`DATASETS` entry plus its builder;
adding a reasoning letter is one :data:`REASONING_PARTS` entry plus its template (its
strategies follow: :func:`strategy_order`). ``docs/extending.md`` walks through both.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Gold span labels, in the order tables show them.
LABELS: tuple[str, ...] = ("TIMEX", "EVENT")


@dataclass(frozen=True)
class Task:
    """An extraction task: which gold labels it extracts."""

    name: str
    labels: tuple[str, ...]

    @property
    def single_label(self) -> str | None:
        """The one label of a single-label task (token classifiers exist only for those)."""
        return self.labels[0] if len(self.labels) == 1 else None


#: The ``kind`` of a configuration's MLflow run: a prompted model, or a fine-tuned tagger.
RUN_KINDS = ("prompted", "finetuned")

TASKS: dict[str, Task] = {
    "timex": Task("timex", ("TIMEX",)),
    "eventx": Task("eventx", ("EVENT",)),
    "comp": Task("comp", ("TIMEX", "EVENT")),
}
TASK_ORDER: tuple[str, ...] = tuple(TASKS)
TASK_LABELS: dict[str, tuple[str, ...]] = {name: task.labels for name, task in TASKS.items()}
#: The single-label tasks, in study order: the ones a BIO token classifier is trained for.
TOKEN_CLASSIFIER_TASKS: tuple[str, ...] = tuple(name for name, task in TASKS.items() if task.single_label)


@dataclass(frozen=True)
class Dataset:
    """A test set of the study.

    Attributes:
        name: the file stem (``data/{prepared,derived}/{task}/{name}.jsonl``).
        dimension: the generalization dimension it measures (``base`` for the reference).
        documents: whole documents rather than sentences (larger generation budget).
        derived: built from ``base`` by a derive stage (lives under ``data/derived``).
        tasks: the tasks it exists for.
    """

    name: str
    dimension: str
    documents: bool = False
    derived: bool = False
    tasks: tuple[str, ...] = ("timex", "eventx")


DATASETS: dict[str, Dataset] = {
    "base": Dataset("base", "base", tasks=("timex", "eventx", "comp")),
    "adv": Dataset("adv", "robustness", derived=True),
    "adv_p": Dataset("adv_p", "robustness", derived=True),
    "t2c": Dataset("t2c", "domain"),
    "voc": Dataset("voc", "domain", derived=True),
    "len": Dataset("len", "structural", documents=True),
}
DATASET_ORDER: tuple[str, ...] = tuple(DATASETS)
#: The compositional dimension is a task (joint extraction) on the base sentences.
COMPOSITIONAL_TASK = "comp"
DIMENSIONS: tuple[str, ...] = ("robustness", "domain", "compositional", "structural")
DOCUMENT_DATASETS: frozenset[str] = frozenset(name for name, d in DATASETS.items() if d.documents)
DERIVED_DATASETS: tuple[str, ...] = tuple(name for name, d in DATASETS.items() if d.derived)
#: Training and validation splits (prepared, never test sets).
SPLITS: tuple[str, ...] = ("train", "val")

#: The span metrics of ``src.scoring.metrics``, each a key of a score's statistics and of a
#: run summary's per-dataset block; the first is the primary metric.
METRICS: tuple[str, ...] = ("lcs", "strict", "relaxed")
#: The primary metric (the paper's word-LCS micro F1): its key in score statistics, summaries
#: and bootstrap artifacts. Its F1 is logged without a scorer suffix (``{task}.{dataset}.f1``).
PRIMARY_METRIC = METRICS[0]
#: The primary metric's name in the scorer registry (``src.scoring.scorer_registry``), in
#: ``--variant`` choices, in the ``scoring_variants`` run parameter and in report tables.
PRIMARY_SCORER = "paper"
#: The primary scorer's title (its ``VariantSpec.title``, a report column header).
PRIMARY_METRIC_LABEL = "LCS F1 (paper)"


def dataset_keys() -> list[str]:
    """Every ``task/dataset`` pair of the study (13), in report order."""
    return [f"{task}/{name}" for task in TASK_ORDER for name in DATASET_ORDER if task in DATASETS[name].tasks]


def dimension_of(task: str, dataset: str) -> str:
    """The dimension a ``task/dataset`` pair measures (``comp/base`` is compositional)."""
    if task == COMPOSITIONAL_TASK:
        return "compositional"
    return DATASETS[dataset].dimension


def dimension_keys() -> dict[str, list[str]]:
    """Dimension -> its ``task/dataset`` keys (``base`` excluded: it is the reference)."""
    out: dict[str, list[str]] = {dimension: [] for dimension in DIMENSIONS}
    for key in dataset_keys():
        task, dataset = key.split("/")
        dimension = dimension_of(task, dataset)
        if dimension != "base":
            out[dimension].append(key)
    return out


def dimension_datasets(dimension: str) -> dict[str, list[str]]:
    """Task -> datasets a Hydra ``dimension`` config runs: its own sets plus ``base`` for pairing.

    ``all`` is every pair of the study, ``base`` the reference sets; the configs in
    ``conf/dimension/`` read this through the ``${study:NAME}`` resolver, so a new dataset
    is one :data:`DATASETS` entry.
    """
    if dimension not in ("all", "base", *DIMENSIONS):
        raise ValueError(f"unknown dimension {dimension!r}; expected all, base or one of {DIMENSIONS}")
    out: dict[str, list[str]] = {task: [] for task in TASK_ORDER}
    if dimension == "base":
        return {task: ["base"] if task in DATASETS["base"].tasks else [] for task in TASK_ORDER}
    for key in dataset_keys():
        task, dataset = key.split("/")
        if dimension == "all" or dimension_of(task, dataset) == dimension:
            out[task].append(dataset)
    if dimension != "all":
        for task, names in out.items():
            if names and task != COMPOSITIONAL_TASK:
                names.insert(0, "base")
    return out


def dataset_path(root_prepared: str, root_derived: str, task: str, dataset: str) -> str:
    """Where a dataset's JSONL lives: derived sets under ``data/derived``, the rest prepared."""
    root = root_derived if DATASETS.get(dataset, Dataset(dataset, "base")).derived else root_prepared
    return f"{root}/{task}/{dataset}.jsonl"


@dataclass(frozen=True)
class ReasoningPart:
    """One reasoning type: its letter in strategy names and its place in the prompt."""

    letter: str
    name: str


#: In the order a strategy name lists its letters, joined by ``+`` (``A+D+I``); the order
#: of the parts inside a prompt is the templates' (``src/prompts/templates.py``).
REASONING_PARTS: tuple[ReasoningPart, ...] = (
    ReasoningPart("A", "abductive"),
    ReasoningPart("D", "deductive"),
    ReasoningPart("I", "inductive"),
)


def strategy_order(parts: tuple[ReasoningPart, ...] = REASONING_PARTS) -> tuple[str, ...]:
    """Every combination of the reasoning parts, in the order tables show them.

    Fewer parts first; among as many parts, the combination whose letters stand later in
    :data:`REASONING_PARTS` first (the letters as binary digits, the first letter the highest).
    For A, D, I: ``I, D, A, D+I, A+I, A+D, A+D+I``; a new letter adds its combinations.
    """
    count = len(parts)
    masks = sorted(range(1, 2**count), key=lambda mask: (bin(mask).count("1"), mask))
    return tuple(
        "+".join(part.letter for index, part in enumerate(parts) if mask >> (count - 1 - index) & 1) for mask in masks
    )


#: The study's strategies (seven: every combination of A, D and I), in the order tables show them.
STRATEGY_ORDER: tuple[str, ...] = strategy_order()
#: The row label of fine-tuned configurations in strategy-ordered tables.
FINETUNED = "finetuned"


def strategy_parts(name: str) -> dict[str, bool]:
    """``{"abductive": ..., "deductive": ..., "inductive": ...}`` for a strategy name."""
    letters = name.split("+")
    known = {part.letter: part.name for part in REASONING_PARTS}
    if not letters or any(letter not in known for letter in letters) or len(set(letters)) != len(letters):
        raise ValueError(f"unknown strategy {name!r} (expected one of {', '.join(STRATEGY_ORDER)})")
    return {part.name: part.letter in letters for part in REASONING_PARTS}


def strategy_groups() -> dict[str, tuple[str, ...]]:
    """The study's strategy groups: inductive+ (with exemplars) and non-inductive."""
    inductive = tuple(s for s in STRATEGY_ORDER if strategy_parts(s)["inductive"])
    return {
        "all": STRATEGY_ORDER,
        "inductive+": inductive,
        "non-inductive": tuple(s for s in STRATEGY_ORDER if s not in inductive),
    }
