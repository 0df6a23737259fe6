"""The report tests' one MLflow store, shared by the whole session (creating one takes seconds)."""

from __future__ import annotations

import pytest

from tests.helpers.mlflow_study import Store, log_study


@pytest.fixture(scope="session")
def store(tmp_path_factory) -> Store:
    """A SQLite store of a small study and the summaries naming its configurations."""
    return log_study(tmp_path_factory.mktemp("store"))
