"""Floats written the same on every machine.

Training losses, gradient norms and embedding similarities differ in their last bits from one
CPU to another (summation order, vector units), and a float printed at full precision carries
those bits into a DVC output's hash. Such values are written rounded to :data:`DIGITS`
significant digits; values computed from counts (F1, rates) are exact and never pass here.
"""

from __future__ import annotations

import math
from typing import Any

#: Significant digits kept of a value that comes out of floating-point training or similarity.
DIGITS = 6


def rounded(value: Any, digits: int = DIGITS) -> Any:
    """``value`` with every float (also inside dicts, lists and tuples) rounded to ``digits``
    significant digits; non-finite floats, ints, bools and strings unchanged."""
    if isinstance(value, bool) or not isinstance(value, (float, dict, list, tuple)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or value == 0.0:
            return value
        return float(f"{value:.{digits}g}")
    if isinstance(value, dict):
        return {key: rounded(item, digits) for key, item in value.items()}
    return [rounded(item, digits) for item in value]
