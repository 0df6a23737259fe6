"""Floats that come out of training or embeddings are written the same on every machine (src/rounding.py)."""

from __future__ import annotations

import json
import math

import numpy as np

from src.rounding import DIGITS, rounded


def test_two_computations_differing_in_the_last_bits_write_the_same_bytes():
    rng = np.random.default_rng(38)
    values = rng.normal(size=1000)
    # one sum in two orders: equal to about 1e-16 relative, rarely equal to the bit
    forward = [float(np.sum(row)) for row in np.outer(values, [1.0, 1e-3, 7.0])]
    backward = [float(np.sum(row[::-1])) for row in np.outer(values, [1.0, 1e-3, 7.0])]
    nudged = [math.nextafter(v, math.inf) for v in forward]  # one ulp apart: what another CPU may print
    assert forward != nudged
    assert json.dumps(rounded({"loss": forward})) == json.dumps(rounded({"loss": nudged}))
    assert json.dumps(rounded(forward)) == json.dumps(rounded(backward))


def test_rounding_keeps_significant_digits_structure_and_what_is_not_a_float():
    data = {"loss": 0.123456789, "big": 123456.789, "tiny": 1.23456789e-9, "n": 3, "ok": True, "name": "x"}
    out = rounded({**data, "nested": [data, (0.5, float("nan"))]})
    assert out["loss"] == 0.123457 and out["big"] == 123457.0 and out["tiny"] == 1.23457e-09
    assert (out["n"], out["ok"], out["name"]) == (3, True, "x") and isinstance(out["n"], int)
    assert out["nested"][0] == {k: out[k] for k in data} and out["nested"][1][0] == 0.5
    assert math.isnan(out["nested"][1][1]) and len(f"{out['loss']}".lstrip("0.")) <= DIGITS
