"""The 2x2 sweep through hydra-ray-launcher on a local Ray instance (``hydra/launcher=local_ray``).

Slow (Ray starts a GCS, a raylet and worker processes: about 25 s idle, more on a loaded
box) and needs the ``ray`` extra (``pip install -e '.[ray]'``); skipped otherwise. Ray is
started by the launcher for this sweep only and shut down when the sweep ends.
"""

from __future__ import annotations

import pytest

from tests.helpers import scale_harness as harness

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def test_ray_sweep_matches_the_sequential_sweep(tmp_path):
    pytest.importorskip("ray", reason="ray not installed: pip install -e '.[ray]'")
    pytest.importorskip(
        "hydra_plugins.hydra_ray_launcher", reason="hydra-ray-launcher not installed: pip install -e '.[ray]'"
    )
    harness.write_workspace(tmp_path)
    with harness.model_server() as server:
        reference_uri = f"sqlite:///{tmp_path / 'sequential.db'}"
        done = harness.sweep(tmp_path, "sequential", server.base_url, reference_uri)
        assert done.returncode == 0, harness.describe(done)
        uri = f"sqlite:///{tmp_path / 'ray.db'}"
        before = server.request_count
        done = harness.sweep(
            tmp_path,
            "ray",
            server.base_url,
            uri,
            launcher="local_ray",
            env_extra={"TEMPGEN_N_JOBS": "2", "RAY_USAGE_STATS_ENABLED": "0"},
            timeout=360,
        )
        assert done.returncode == 0, harness.describe(done)
        assert server.request_count - before == 4 * 2
    runs, reference = harness.finished_runs(uri), harness.finished_runs(reference_uri)
    assert sorted(runs) == harness.RUN_NAMES
    for name, run in runs.items():
        assert run["status"] == "FINISHED", name
        assert run["metrics"] == reference[name]["metrics"], name
