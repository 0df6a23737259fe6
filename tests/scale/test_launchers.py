"""Hydra launchers run the 2x2 sweep (model x strategy) with the results of a sequential sweep.

``python -m src.run -m hydra/launcher=local_joblib|local_submitit model=qwen25_7b,llama3_8b
strategy=I,D`` against a deterministic loopback model server: each sweep has its own SQLite
MLflow store, response cache and sweep folder, and must end with 4 FINISHED runs whose
metrics (timings aside) equal those of the same sweep through Hydra's basic (sequential)
launcher. The submitit local executor is how the SLURM path (pickled job, submitit folder,
result collection) is exercised without a cluster.
"""

from __future__ import annotations

import pytest

from tests.helpers import scale_harness as harness
from tests.helpers.paths import REPO_ROOT

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("scale")
    harness.write_workspace(root)
    return root


@pytest.fixture(scope="module")
def server():
    with harness.model_server() as running:
        yield running


@pytest.fixture(scope="module")
def sequential(workspace, server):
    """The reference: the same sweep through the basic launcher, one job after the other."""
    uri = f"sqlite:///{workspace / 'sequential.db'}"
    done = harness.sweep(workspace, "sequential", server.base_url, uri)
    assert done.returncode == 0, harness.describe(done)
    runs = harness.finished_runs(uri)
    assert sorted(runs) == harness.RUN_NAMES
    return runs


def check_same_results(runs: dict, reference: dict) -> None:
    assert sorted(runs) == harness.RUN_NAMES
    for name, run in runs.items():
        assert run["status"] == "FINISHED", name
        assert run["metrics"]["timex.base.usage.requests"] == 2.0  # limit=2
        assert run["metrics"]["timex.base.usage.cached"] == 0.0  # its own cache: every answer came from the server
        assert run["metrics"] == reference[name]["metrics"], name


def test_the_reference_sweep_is_not_trivial(sequential):
    f1 = {name: run["metrics"]["timex.base.f1"] for name, run in sequential.items()}
    assert len(set(f1.values())) == 4  # the fake server answers each model and strategy differently
    assert all(0 < value <= 1 for value in f1.values()), f1


@pytest.mark.parametrize(
    "launcher, plugin",
    [
        ("local_joblib", "hydra_plugins.hydra_joblib_launcher"),
        ("local_submitit", "hydra_plugins.hydra_submitit_launcher"),
    ],
)
def test_launcher_sweep_matches_the_sequential_sweep(workspace, server, sequential, launcher, plugin):
    pytest.importorskip(plugin, reason=f"{plugin} not installed: pip install -e '.[scale]'")
    uri = f"sqlite:///{workspace / f'{launcher}.db'}"
    # No pre-created store: the concurrent jobs' first use of a fresh SQLite file is safe (src.tracking.store).
    before = server.request_count
    done = harness.sweep(
        workspace, launcher, server.base_url, uri, launcher=launcher, env_extra={"TEMPGEN_N_JOBS": "2"}
    )
    assert done.returncode == 0, harness.describe(done)
    assert server.request_count - before == 4 * 2
    check_same_results(harness.finished_runs(uri), sequential)
    # each job wrote its own Hydra output folder inside the sweep folder
    subdirs = sorted(p.name for p in (workspace / f"{launcher}-multirun").iterdir() if p.name[0].isdigit())
    assert len(subdirs) == 4
    if launcher == "local_submitit":
        assert (workspace / f"{launcher}-multirun" / ".submitit").is_dir()


@pytest.mark.parametrize(
    "launcher, plugin, target",
    [
        ("local_joblib", "hydra_plugins.hydra_joblib_launcher", "joblib_launcher.JoblibLauncher"),
        ("local_submitit", "hydra_plugins.hydra_submitit_launcher", "submitit_launcher.LocalLauncher"),
        ("slurm", "hydra_plugins.hydra_submitit_launcher", "submitit_launcher.SlurmLauncher"),
        ("local_ray", "hydra_plugins.hydra_ray_launcher", "ray_launcher.RayLauncher"),
        ("ray_cluster", "hydra_plugins.hydra_ray_launcher", "ray_launcher.RayLauncher"),
    ],
)
def test_launcher_configs_compose_on_the_plugins_schemas(launcher, plugin, target, monkeypatch):
    """Each conf/hydra/launcher file extends its plugin's config; required values fail until given."""
    pytest.importorskip(plugin, reason=f"{plugin} not installed")
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from omegaconf.errors import InterpolationResolutionError

    for name in ("SBATCH_PARTITION", "RAY_ADDRESS", "TEMPGEN_N_JOBS"):
        monkeypatch.delenv(name, raising=False)
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[f"hydra/launcher={launcher}"], return_hydra_config=True)
        given = compose(
            "config",
            return_hydra_config=True,
            overrides=[
                f"hydra/launcher={launcher}",
                "hydra.launcher.partition=gpu"
                if launcher == "slurm"
                else "hydra.launcher.ray.init.address=ray://head:10001"
                if launcher == "ray_cluster"
                else "seed=13",
            ],
        )
    node = cfg.hydra.launcher
    assert node._target_.endswith(target)
    required = {"slurm": "partition", "ray_cluster": "ray.init.address"}.get(launcher)
    if required:
        with pytest.raises(InterpolationResolutionError):
            OmegaConf.select(node, required, throw_on_missing=True)
        resolved = OmegaConf.to_container(given.hydra.launcher, resolve=True)
        assert OmegaConf.select(OmegaConf.create(resolved), required) in ("gpu", "ray://head:10001")
    else:
        resolved = OmegaConf.to_container(node, resolve=True)
    if launcher == "local_joblib":
        assert resolved["n_jobs"] == 2
    if launcher == "slurm":
        assert resolved["timeout_min"] == 240 and resolved["array_parallelism"] == 16 and resolved["gpus_per_node"] == 0
    if launcher == "local_ray":
        assert resolved["ray"]["init"]["address"] is None and resolved["ray"]["init"]["num_cpus"] == 2
