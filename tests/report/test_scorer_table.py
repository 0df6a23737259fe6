"""The report shows the released scorer beside the paper's formula when a run logged both."""

from __future__ import annotations

import pandas as pd

from src.report.tables import scorer_table


def test_variant_columns_follow_the_registry_and_rows_without_them_are_dropped():
    scores = pd.DataFrame(
        [
            {
                "config": "m-I",
                "task": "timex",
                "dataset": "base",
                "f1": 0.5,
                "released.f1": 0.4,
                "released_char.f1": 0.7,
            },
            {"config": "m-ft", "task": "timex", "dataset": "base", "f1": 0.9},
        ]
    )
    table = scorer_table(scores)
    assert list(table.columns) == ["configuration", "task", "dataset", "paper", "released", "released_char"]
    assert table.to_dict("records") == [
        {
            "configuration": "m-I",
            "task": "timex",
            "dataset": "base",
            "paper": 0.5,
            "released": 0.4,
            "released_char": 0.7,
        }
    ]


def test_no_table_when_only_the_primary_metric_was_logged():
    assert scorer_table(pd.DataFrame([{"config": "m-I", "task": "timex", "dataset": "base", "f1": 0.5}])) is None
