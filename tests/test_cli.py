"""The shared ``--limit`` parser accepts what DVC and Hydra pass through."""

from __future__ import annotations

import pytest

from src.core.values import optional_int


@pytest.mark.parametrize("value, expected", [(None, None), ("null", None), ("", None), ("7", 7), (7, 7), (0, 0)])
def test_optional_int_reads_yaml_and_hydra_values(value, expected):
    assert optional_int(value) == expected


@pytest.mark.parametrize("value", ["seven", "-1", -3, True, "1.5", "None", "none"])
def test_optional_int_rejects_nonsense(value):
    with pytest.raises(ValueError):
        optional_int(value)
