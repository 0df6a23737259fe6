"""Shared pytest options (slow tests run only with --runslow), the session's smoke pipeline and prepared data."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_configure(config):
    """Hydra composes ``conf/`` with the project's resolvers and code-defined groups in every test."""
    from src.config.store import register_config

    register_config()


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip_slow = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)


@pytest.fixture(scope="session")
def smoke_project(tmp_path_factory) -> Path:
    """A copy of the project after one smoke-profile ``dvc repro`` (tests/helpers/smoke_project.py),
    shared by every end-to-end test of the session; the repro must succeed."""
    from tests.helpers.paths import REPO_ROOT
    from tests.helpers.smoke_project import smoke_repro

    if not (REPO_ROOT / "data/raw/timebank-1.2").is_dir():
        pytest.skip("data/raw not pulled")
    project, done = smoke_repro(tmp_path_factory.mktemp("pipeline") / "project")
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    return project


@pytest.fixture(scope="session")
def prepared_data(tmp_path_factory) -> Path:
    """``data/prepared`` as the prepare stage builds it from ``data/raw`` (tests/helpers/prepared_data.py),
    once per session into a tmp folder, for the tests that read real prepared records."""
    from tests.helpers.paths import REPO_ROOT
    from tests.helpers.prepared_data import prepare_into

    if not (REPO_ROOT / "data/raw/timebank-1.2").is_dir():
        pytest.skip("data/raw not pulled: run `dvc pull data.dvc`")
    return prepare_into(tmp_path_factory.mktemp("prepare"))
