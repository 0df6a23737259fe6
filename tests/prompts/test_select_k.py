"""k selection on validation: best F1, ties to the smaller k, bad scores rejected."""

from __future__ import annotations

import math

import pytest

from src.prompts import select_k


def test_picks_the_best_k_and_evaluates_each_once():
    calls = []

    def evaluate(k):
        calls.append(k)
        return {3: 0.41, 5: 0.47, 8: 0.45}[k]

    selection = select_k(evaluate)
    assert selection.best_k == 5
    assert selection.scores == {3: 0.41, 5: 0.47, 8: 0.45}
    assert calls == [3, 5, 8]


def test_ties_go_to_the_smaller_k():
    assert select_k(lambda k: 0.5).best_k == 3
    assert select_k(lambda k: {3: 0.40, 5: 0.52, 8: 0.52}[k]).best_k == 5
    assert select_k(lambda k: {3: 0.500, 5: 0.504, 8: 0.51}[k], tolerance=0.01).best_k == 3
    assert select_k(lambda k: {3: 0.500, 5: 0.504, 8: 0.51}[k], tolerance=0.0).best_k == 8


@pytest.mark.parametrize("bad", [math.nan, -0.1, 1.5, None, "0.5"])
def test_rejects_scores_that_are_not_f1(bad):
    with pytest.raises(ValueError, match="expected an F1"):
        select_k(lambda k: bad)


def test_rejects_bad_candidates():
    with pytest.raises(ValueError, match="no candidate"):
        select_k(lambda k: 0.5, candidates=[])
    with pytest.raises(ValueError, match="positive integers"):
        select_k(lambda k: 0.5, candidates=[0, 3])
