"""Pairwise comparisons of configurations, the family every research question draws on.

Each pair of configurations is compared on the instances both were scored on; pairs whose
shared instances are the same form one comparison set. Every verdict is the calibrated one of
:mod:`src.scoring.calibrated` on the set's resampling units (whole documents by default): a
two-sided document-swap permutation test for *better*/*worse* (one draw of swaps serves every
pair of a set), TOST on the jackknife t interval for *equivalent*, and *inconclusive* below the
minimum documents holding a gold span. A multiple-comparison correction runs over the family of
all pairwise tests (every tested unordered pair on every dataset) on the two-sided p-values;
pairs below the minimum documents have none and stay out of the family.

Outcome tables are DataFrames (configs x configs) of the four verdicts
"better"/"equivalent"/"inconclusive"/"worse" for the row configuration against the column one
("untested" where the two share no instance). The study's own reading is kept beside, named as
the study's: its one-sided percentile bootstrap (``src.scoring.stats.all_pairs_bootstrap``,
"better" when p(A > B) < alpha, else "almost equal"), which the calibration
(docs/scoring.md#calibration) shows to be liberal at these sizes.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from src.scoring.calibrated import DEFAULT_PERMUTATIONS, MIN_DOCUMENTS, compare_all_pairs
from src.scoring.clustered import DOCUMENT, resampling_units
from src.scoring.stats import (
    all_pairs_bootstrap,
    benjamini_hochberg,
    classify_outcome,
    holm,
    observed_f1,
    resample_counts,
)
from src.scoring.verdicts import STUDY_EQUAL, classify_verdict

CORRECTIONS = {"holm": holm, "bh": benjamini_hochberg}
#: How the report names each correction (and the raw p-values, "none").
CORRECTION_NAMES = {"none": "raw p", "holm": "Holm", "bh": "Benjamini-Hochberg"}
#: The outcome of a pair that shares no instance on a dataset (counted in no outcome share).
UNTESTED = "untested"


@dataclass
class PairwiseTests:
    """All pairwise tests on one dataset, each pair on the instances both share.

    Attributes:
        configs: the configurations, in the order of both axes.
        f1: (S, S) observed F1 of the row configuration on the instances it shares with the
            column one (diagonal: on all its own instances).
        p_value: (S, S) the study's one-sided bootstrap p for "row better than column" (its
            reading only); NaN where the pair shares no instance (diagonal 0.5).
        instances: (S, S) number of instances each pair was compared on (diagonal: the
            configuration's own).
        p_equivalent: (S, S) calibrated TOST p of "|delta| < margin" (symmetric; NaN where untested
            or below the minimum documents).
        delta_sd: (S, S) jackknife standard error of the delta (the calibrated test's noise).
        units: (S, S) resampling units (documents, or instances) each pair was compared on.
        p_two_sided: (S, S) the calibrated two-sided permutation p (symmetric; NaN where untested
            or below the minimum documents): the p every verdict reads.
        documents: (S, S) resampling units holding a gold span each pair was compared on.
        minimum_documents: fewest such units a verdict is given on.
        ci_low, ci_high: (S, S) the t interval of row minus column at 1 - alpha.
        mdd_pairs: (S, S) each pair's minimum detectable difference (NaN where no verdict can be given).
    """

    key: str
    configs: list[str]
    f1: np.ndarray
    p_value: np.ndarray
    instances: np.ndarray
    p_equivalent: np.ndarray | None = None
    delta_sd: np.ndarray | None = None
    units: np.ndarray | None = None
    p_two_sided: np.ndarray | None = None
    documents: np.ndarray | None = None
    minimum_documents: int = MIN_DOCUMENTS
    ci_low: np.ndarray | None = None
    ci_high: np.ndarray | None = None
    mdd_pairs: np.ndarray | None = None

    def mdd(self, alpha: float | None = None, power: float | None = None) -> float:
        """Median minimum detectable difference over the pairs that can get a verdict (NaN when none).

        The MDDs were computed at the analysis's alpha and power (the arguments are kept for callers)."""
        if self.mdd_pairs is None:
            return float("nan")
        upper_i, upper_j = np.triu_indices(len(self.configs), 1)
        keep = self.tested[upper_i, upper_j]
        values = self.mdd_pairs[upper_i[keep], upper_j[keep]]
        values = values[~np.isnan(values)]
        return float(np.median(values)) if values.size else float("nan")

    @property
    def tested(self) -> np.ndarray:
        """(S, S) True for off-diagonal pairs that share at least one instance."""
        mask = np.asarray(self.instances) > 0
        np.fill_diagonal(mask, False)
        return mask

    @property
    def pairs(self) -> int:
        """Unordered pairs tested."""
        return int(np.triu(self.tested, 1).sum())

    def instance_counts(self) -> list[tuple[int, int]]:
        """(instances, unordered pairs compared on that many), most instances first; 0 = untested."""
        upper_i, upper_j = np.triu_indices(len(self.configs), 1)
        values, counts = np.unique(np.asarray(self.instances)[upper_i, upper_j], return_counts=True)
        return sorted(((int(v), int(c)) for v, c in zip(values, counts)), reverse=True)

    def directional(self, p_two_sided: np.ndarray | None = None) -> np.ndarray:
        """(S, S) a two-sided p-matrix placed in the observed direction of each pair (the other gets 1),
        so ``classify_verdict(A, A.T, ...)`` reads it; NaN where untested or without a test."""
        p = self.p_two_sided if p_two_sided is None else p_two_sided
        if p is None:
            return np.full_like(self.p_value, np.nan)
        delta = self.f1 - self.f1.T
        out = np.where(np.isnan(p), np.nan, np.where(delta > 0, p, 1.0))
        np.fill_diagonal(out, 1.0)
        return out


@dataclass
class ComparisonSet:
    """The pairs of one dataset compared on one instance set.

    Attributes:
        ids: the shared instances (sorted: the resample matrix's columns).
        configs: every configuration of a pair in ``pairs`` (each was scored on all ``ids``).
        pairs: (i, j) positions, i < j, in the dataset's configuration list.
    """

    ids: tuple[str, ...]
    configs: list[int]
    pairs: list[tuple[int, int]]


def comparison_sets(ids_by_config: Sequence[Collection[str]]) -> list[ComparisonSet]:
    """Group the pairs of configurations by the instances both were scored on.

    Configurations scored on identical id sets form one group; its pairs share that set.
    A pair across two groups uses their intersection; pairs whose intersections are equal
    form one set (a group's own pairs join it when the intersection is the whole group
    set). Pairs that share no instance are left out (untested). Deterministic: sets
    appear in the order of their first configuration pair.
    """
    groups: dict[frozenset, list[int]] = {}
    for n, ids in enumerate(ids_by_config):
        groups.setdefault(frozenset(ids), []).append(n)
    keys = list(groups)
    found: dict[frozenset, list[tuple[int, int]]] = {}
    for a, key_a in enumerate(keys):
        for key_b in keys[a:]:
            shared = key_a if key_b is key_a else key_a & key_b
            if not shared:
                continue
            if key_b is key_a:
                pairs = list(itertools.combinations(groups[key_a], 2))
            else:
                pairs = [(min(i, j), max(i, j)) for i in groups[key_a] for j in groups[key_b]]
            if pairs:
                found.setdefault(shared, []).extend(pairs)
    out = []
    for shared, pairs in found.items():
        pairs = sorted(pairs)
        out.append(ComparisonSet(tuple(sorted(shared)), sorted({n for pair in pairs for n in pair}), pairs))
    return sorted(out, key=lambda s: s.pairs[0])


def dataset_seed(seed: int, key: str, ids: Sequence[str] | None = None) -> np.random.Generator:
    """A generator for one comparison set's resamples, fixed by the seed, the dataset and its instances."""
    entropy = [seed, zlib.crc32(key.encode("utf-8"))]
    if ids is not None:
        entropy.append(zlib.crc32("\x1f".join(ids).encode("utf-8")))
    return np.random.default_rng(entropy)


def pairwise_tests(
    datasets: Mapping[str, object],
    resamples: int,
    seed: int,
    *,
    margin: float,
    alpha: float,
    power: float,
    unit: str = DOCUMENT,
    permutations: int = DEFAULT_PERMUTATIONS,
    min_documents: int = MIN_DOCUMENTS,
) -> dict[str, PairwiseTests]:
    """All-pairs tests per dataset, each pair on the instances both configurations were scored on.

    ``datasets`` maps a key to an object with ``configs``, ``ids`` (config -> ids) and
    ``stacked(configs, ids)`` (a :class:`src.report.results.DatasetStats`). Each comparison set
    gets its calibrated tests (:func:`src.scoring.calibrated.compare_all_pairs`, one draw of
    ``permutations`` swaps) and the study's bootstrap of ``resamples`` (one resample matrix), both
    seeded by :func:`dataset_seed` from the seed, the dataset and the instance set. Datasets with
    fewer than two configurations are skipped.
    """
    out = {}
    for key, data in datasets.items():
        configs = list(data.configs)
        size = len(configs)
        if size < 2:
            continue
        f1, p = np.full((size, size), np.nan), np.full((size, size), np.nan)
        np.fill_diagonal(p, 0.5)
        instances, units, documents = (np.zeros((size, size), dtype=np.int64) for _ in range(3))
        calibrated = {name: np.full((size, size), np.nan) for name in ("p", "eq", "se", "low", "high", "mdd")}
        for s, config in enumerate(configs):
            own = data.stacked([config], list(data.ids[config]))[0]
            f1[s, s] = observed_f1(own[None])[0]
            instances[s, s] = own.shape[0]
        for found in comparison_sets([data.ids[c] for c in configs]):
            stats = resampling_units(data.stacked([configs[n] for n in found.configs], found.ids), found.ids, unit)
            counts = resample_counts(stats.shape[1], resamples, dataset_seed(seed, key, found.ids))
            result = all_pairs_bootstrap(stats, counts)
            i, j = np.array(found.pairs, dtype=np.int64).T
            a, b = np.searchsorted(found.configs, i), np.searchsorted(found.configs, j)  # configs is sorted
            tests = compare_all_pairs(
                stats,
                list(zip(a, b)),
                alpha,
                margin,
                power,
                permutations,
                dataset_seed(seed, f"{key}|swaps", found.ids),
                min_documents,
            )
            f1[i, j], f1[j, i] = result.f1[a], result.f1[b]
            p[i, j], p[j, i] = result.p_value[a, b], result.p_value[b, a]
            for name, values in (
                ("p", tests.p_value),
                ("eq", tests.p_equivalent),
                ("se", tests.se),
                ("low", tests.ci_low),
                ("high", tests.ci_high),
                ("mdd", tests.mdd),
            ):
                calibrated[name][i, j], calibrated[name][j, i] = values[a, b], values[b, a]
            instances[i, j] = instances[j, i] = len(found.ids)
            units[i, j] = units[j, i] = stats.shape[1]
            documents[i, j] = documents[j, i] = tests.documents
        out[key] = PairwiseTests(
            key,
            configs,
            f1,
            p,
            instances,
            p_equivalent=calibrated["eq"],
            delta_sd=calibrated["se"],
            units=units,
            p_two_sided=calibrated["p"],
            documents=documents,
            minimum_documents=min_documents,
            ci_low=calibrated["low"],
            ci_high=calibrated["high"],
            mdd_pairs=calibrated["mdd"],
        )
    return out


def _family_pieces(
    tests: Mapping[str, PairwiseTests], method: str, value
) -> tuple[np.ndarray, list[tuple[str, np.ndarray, np.ndarray]]]:
    """The family of every tested unordered pair on every dataset: ``value(test, i, j)`` per pair,
    adjusted together by ``method``, with each dataset's (key, i, j) to place them back."""
    if method not in CORRECTIONS:
        raise ValueError(f"unknown correction {method!r}; choose one of {sorted(CORRECTIONS)}")
    pieces, layout = [], []
    for key, test in tests.items():
        upper_i, upper_j = np.triu_indices(len(test.configs), 1)
        keep = test.tested[upper_i, upper_j]
        upper_i, upper_j = upper_i[keep], upper_j[keep]
        pieces.append(value(test, upper_i, upper_j))
        layout.append((key, upper_i, upper_j))
    adjusted = CORRECTIONS[method](np.concatenate(pieces)) if pieces and sum(map(len, pieces)) else np.array([])
    return adjusted, layout


def directional_adjusted(tests: Mapping[str, PairwiseTests], method: str) -> dict[str, np.ndarray]:
    """Adjusted two-sided p over the family of every tested unordered pair on every dataset, placed
    in each pair's observed direction (:meth:`PairwiseTests.directional`; the other direction gets 1),
    so ``classify_verdict(A, A.T, ...)`` reads the outcome. Untested pairs and pairs below the minimum
    documents stay out of the family and keep NaN."""
    adjusted, layout = _family_pieces(tests, method, lambda t, i, j: _two_sided(t)[i, j])
    out, start = {}, 0
    for key, upper_i, upper_j in layout:
        test = tests[key]
        matrix = np.full((len(test.configs),) * 2, np.nan)
        values = adjusted[start : start + upper_i.size]
        start += upper_i.size
        matrix[upper_i, upper_j] = matrix[upper_j, upper_i] = values
        out[key] = test.directional(matrix)
    return out


def study_adjusted(tests: Mapping[str, PairwiseTests], method: str) -> dict[str, np.ndarray]:
    """The study's reading corrected: its one-sided bootstrap p of the observed direction
    ``min(p_ij, p_ji)`` adjusted over the family; the other direction gets 1."""
    adjusted, layout = _family_pieces(tests, method, lambda t, i, j: np.minimum(t.p_value[i, j], t.p_value[j, i]))
    out, start = {}, 0
    for key, upper_i, upper_j in layout:
        test = tests[key]
        p = test.p_value
        values = adjusted[start : start + upper_i.size]
        start += upper_i.size
        matrix = np.where(test.tested, 1.0, np.nan)
        np.fill_diagonal(matrix, 1.0)
        forward = p[upper_i, upper_j] <= p[upper_j, upper_i]
        backward = p[upper_j, upper_i] <= p[upper_i, upper_j]
        matrix[upper_i[forward], upper_j[forward]] = values[forward]
        matrix[upper_j[backward], upper_i[backward]] = values[backward]
        out[key] = matrix
    return out


def equivalence_adjusted(tests: Mapping[str, PairwiseTests], method: str) -> dict[str, np.ndarray]:
    """Adjusted TOST p-matrices (symmetric) over the family of every tested unordered pair on every dataset.

    The equivalence tests form their own family of the same pairs, corrected by the same method.
    Untested pairs and tests without TOST p-values keep NaN.
    """
    adjusted, layout = _family_pieces(tests, method, lambda t, i, j: _tost(t)[i, j])
    out, start = {}, 0
    for key, upper_i, upper_j in layout:
        matrix = np.full((len(tests[key].configs),) * 2, np.nan)
        matrix[upper_i, upper_j] = matrix[upper_j, upper_i] = adjusted[start : start + upper_i.size]
        start += upper_i.size
        out[key] = matrix
    return out


def outcome_table(
    configs: Sequence[str],
    p_better: np.ndarray,
    alpha: float,
    tested: np.ndarray | None = None,
    p_equivalent: np.ndarray | None = None,
) -> pd.DataFrame:
    """Configs x configs outcomes of row vs column from a one-sided p-matrix.

    With ``p_equivalent`` (TOST p-values) the four verdicts of :mod:`src.scoring.verdicts`;
    without, the study's three-way reading (``equal``: p >= alpha both ways). Off-diagonal
    pairs outside ``tested`` (no shared instance) get :data:`UNTESTED`: they count in no outcome.
    """
    p_better = np.asarray(p_better, dtype=np.float64)
    known = np.nan_to_num(p_better, nan=0.5)
    if p_equivalent is None:
        values = classify_outcome(known, known.T, alpha).astype(object)
    else:
        values = classify_verdict(known, known.T, p_equivalent, alpha)
        np.fill_diagonal(values, "equivalent")
    if tested is not None:
        untested = ~np.asarray(tested, dtype=bool)
        np.fill_diagonal(untested, False)
        values[untested] = UNTESTED
    return pd.DataFrame(values, index=list(configs), columns=list(configs))


def outcome_tables(
    tests: Mapping[str, PairwiseTests],
    alpha: float,
    correction: str,
    adjusted: Mapping[str, np.ndarray] | None = None,
    equivalence: Mapping[str, np.ndarray] | None = None,
) -> dict[str, dict[str, pd.DataFrame]]:
    """``{"none": {key: table}, correction: {key: table}}``: raw and corrected verdicts side by side.

    ``adjusted`` is :func:`directional_adjusted` of ``tests`` and ``equivalence``
    :func:`equivalence_adjusted` when already computed; the corrected verdicts use both.
    """
    adjusted = directional_adjusted(tests, correction) if adjusted is None else adjusted
    equivalence = equivalence_adjusted(tests, correction) if equivalence is None else equivalence
    return {
        "none": {k: outcome_table(t.configs, t.directional(), alpha, t.tested, _tost(t)) for k, t in tests.items()},
        correction: {
            k: outcome_table(t.configs, adjusted[k], alpha, t.tested, equivalence[k]) for k, t in tests.items()
        },
    }


def study_tables(
    tests: Mapping[str, PairwiseTests], alpha: float, correction: str
) -> dict[str, dict[str, pd.DataFrame]]:
    """The study's reading beside the verdicts: "better"/"worse" when its one-sided bootstrap p of
    the observed direction is below alpha, else "almost equal"; raw and corrected."""
    adjusted = study_adjusted(tests, correction)

    def table(test: PairwiseTests, p: np.ndarray) -> pd.DataFrame:
        return outcome_table(test.configs, p, alpha, test.tested).replace("equal", STUDY_EQUAL)

    return {
        "none": {k: table(t, t.p_value) for k, t in tests.items()},
        correction: {k: table(t, adjusted[k]) for k, t in tests.items()},
    }


def _tost(test: PairwiseTests) -> np.ndarray:
    return test.p_equivalent if test.p_equivalent is not None else np.full_like(test.p_value, np.nan)


def _two_sided(test: PairwiseTests) -> np.ndarray:
    return test.p_two_sided if test.p_two_sided is not None else np.full_like(test.p_value, np.nan)


@dataclass
class ComparisonFamily:
    """The pairwise tests of one family of configurations (its own multiple-comparison family).

    Attributes:
        name: e.g. ``prompted`` or ``fine-tuned``.
        configs: the family's configurations.
        tests: dataset key -> tests (datasets with at least two of the configurations).
        p_adjusted: dataset key -> adjusted two-sided p in the observed direction (:func:`directional_adjusted`).
        outcomes: ``{"none": ..., correction: ...}`` verdict tables (:func:`outcome_tables`).
        equivalence_adjusted: dataset key -> adjusted TOST p-matrix (:func:`equivalence_adjusted`).
        study_outcomes: the study's reading, shaped like ``outcomes`` (:func:`study_tables`).
        study_adjusted: dataset key -> the study's adjusted one-sided p (:func:`study_adjusted`).
    """

    name: str
    configs: list[str]
    tests: dict[str, PairwiseTests]
    p_adjusted: dict[str, np.ndarray]
    outcomes: dict[str, dict[str, pd.DataFrame]]
    equivalence_adjusted: dict[str, np.ndarray] = field(default_factory=dict)
    study_outcomes: dict[str, dict[str, pd.DataFrame]] = field(default_factory=dict)
    study_adjusted: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def pairs(self) -> int:
        return sum(test.pairs for test in self.tests.values())


def comparison_family(
    name: str,
    datasets: Mapping[str, object],
    configs: Sequence[str],
    resamples: int,
    seed: int,
    alpha: float,
    correction: str,
    *,
    margin: float,
    power: float,
    unit: str = DOCUMENT,
    permutations: int = DEFAULT_PERMUTATIONS,
    min_documents: int = MIN_DOCUMENTS,
) -> ComparisonFamily:
    """Every pairwise test among ``configs`` on each dataset (``datasets`` values have ``subset``), corrected together."""
    chosen = {key: data.subset(configs) for key, data in datasets.items()}
    tests = pairwise_tests(
        {k: d for k, d in chosen.items() if len(d.configs) >= 2},
        resamples,
        seed,
        margin=margin,
        alpha=alpha,
        power=power,
        unit=unit,
        permutations=permutations,
        min_documents=min_documents,
    )
    adjusted = directional_adjusted(tests, correction)
    equivalence = equivalence_adjusted(tests, correction)
    outcomes = outcome_tables(tests, alpha, correction, adjusted, equivalence)
    return ComparisonFamily(
        name,
        list(configs),
        tests,
        adjusted,
        outcomes,
        equivalence,
        study_tables(tests, alpha, correction),
        study_adjusted(tests, correction),
    )
