"""A run's closing lines: one line per dataset, and the datasets whose answers are not to trust."""

from __future__ import annotations

from src.runs.closing_lines import closing_lines


def test_one_line_per_dataset_and_a_warning_naming_the_datasets_over_the_threshold():
    scored = {"timex/base": {"f1": 0.4531}, "timex/t2c": None, "eventx/base": {"f1": 0.8}}
    instances = {"timex/base": 40, "timex/t2c": 10, "eventx/base": 1}
    failed = {"timex/t2c": 3}
    rates = {
        "timex/base": {"parse_failure_rate": 0.1, "truncated_rate": 0.05, "empty_answer_rate": 0.075},
        "timex/t2c": {"served_model_mismatch_rate": 0.2},
        "eventx/base": {"parse_failure_rate": 0.0, "truncated_rate": 0.5},
    }
    summary, block = closing_lines(scored, instances, failed, rates, 0.05)
    assert summary == [
        "timex/base: F1 0.453 (40 instances)",
        "timex/t2c: not scored (3 of 10 requests failed)",
        "eventx/base: F1 0.800 (1 instance)",
    ]
    assert block == [
        "warning: answers not to trust (warn_rate 0.05); check these datasets:",
        "  parse failures above 5%: timex/base 10.0%",
        "  truncated answers above 5%: eventx/base 50.0%",  # exactly 5% is not above it
        "  empty answers above 5%: timex/base 7.5%",
        "  served-model mismatches above 5%: timex/t2c 20.0%",
    ]


def test_no_warning_when_every_share_is_within_the_threshold():
    summary, block = closing_lines(
        {"comp/base": {"f1": 1.0}}, {"comp/base": 2}, {}, {"comp/base": {"parse_failure_rate": 0.5}}, 0.5
    )
    assert summary == ["comp/base: F1 1.000 (2 instances)"] and block == []
