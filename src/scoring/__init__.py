"""Scoring: span metrics, bootstrap statistics, prediction files and the evaluation of one dataset."""
