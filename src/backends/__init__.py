"""Generation backends, registered by name and imported only when chosen.

``create_backend("openai", model_id=...)`` needs only the ``openai`` client;
``create_backend("transformers", model_id=...)`` imports torch and transformers. A backend whose
optional dependency is missing fails with a message naming the package, and only when chosen.
"""

from __future__ import annotations

import importlib
import inspect

from src.backends.base import Backend, GenerationResult, ResultCallback
from src.core.requests import ChatRequest

BACKENDS: dict[str, tuple[str, str, str]] = {
    # name: (module, class, pip package that provides the heavy dependency)
    "openai": ("src.backends.openai_backend", "OpenAIBackend", "openai"),
    "transformers": ("src.backends.transformers_backend", "TransformersBackend", "transformers torch"),
    "llamacpp": ("src.backends.llamacpp_backend", "LlamaCppBackend", "llama-cpp-python"),
}

__all__ = ["BACKENDS", "Backend", "ChatRequest", "GenerationResult", "ResultCallback", "create_backend"]


def create_backend(name: str, **options) -> Backend:
    """Build the backend registered as ``name`` with its options (from config).

    Raises:
        ValueError: unknown backend name or option.
        ImportError: the backend's dependency is not installed (names the package).
    """
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {sorted(BACKENDS)}")
    module_name, class_name, package = BACKENDS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("src."):
            raise
        raise ImportError(
            f"backend {name!r} needs {package!r}, which is not installed ({exc.name} missing): pip install {package}"
        ) from exc
    backend_class = getattr(module, class_name)
    parameters = inspect.signature(backend_class).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return backend_class(**options)  # it checks its own options (the openai backend's OpenAIOptions)
    accepted = {p.name for p in parameters}
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise ValueError(f"backend {name!r}: unknown options {unknown}; accepted: {sorted(accepted)}")
    return backend_class(**options)
