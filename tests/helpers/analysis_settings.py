"""The study's analysis settings (params.yaml's ``analysis`` block) as the report's functions take
them: the library functions have no defaults of their own, so a test passes the study's values."""

from __future__ import annotations

from src.core.settings import load_params

_ANALYSIS = load_params().analysis
#: What :func:`src.report.comparisons.pairwise_tests` takes besides the data, resamples and seed.
PAIRWISE = {"margin": _ANALYSIS.margin, "alpha": _ANALYSIS.alpha, "power": _ANALYSIS.power}
#: What :func:`src.report.analysis.run_analysis` takes besides resamples, seed, alpha and correction.
STUDY = {"margin": _ANALYSIS.margin, "power": _ANALYSIS.power, "flip_threshold": _ANALYSIS.flip_threshold}
#: :func:`src.report.robustness.robustness_table`'s threshold and level.
ROBUSTNESS = {"threshold": _ANALYSIS.flip_threshold, "alpha": _ANALYSIS.alpha}
