"""Re-quantised GGUF files: derived by llama.cpp once, identical every time, re-derived when the
cached copy no longer matches, and part of the backend's cache identity."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from collections import Counter

import pytest

from src.backends.gguf_files import gguf_path
from src.backends.gguf_quantize import RequantizedGGUF, check_quant_type

llama_cpp = pytest.importorskip("llama_cpp")


@pytest.fixture(scope="module")
def shipped():
    return gguf_path("smollm2-135m-gguf")


def tensor_types(path) -> Counter:
    import gguf

    return Counter(tensor.tensor_type.name for tensor in gguf.GGUFReader(str(path)).tensors)


def test_the_derived_file_is_the_same_bytes_every_time_and_is_q4_0(shipped, tmp_path):
    first = RequantizedGGUF(shipped, "q4_0", tmp_path / "a")
    second = RequantizedGGUF(shipped, "Q4_0", tmp_path / "b")
    assert first.sha256 == second.sha256
    assert first.path.read_bytes() == second.path.read_bytes()
    types = tensor_types(first.path)
    assert types["Q4_0"] == 210 and "Q4_1" not in types, types  # every Q4_1 matrix re-quantised
    assert types["Q8_0"] == 1  # the token embeddings keep the source's type
    assert first.identity() == {"requantize": "Q4_0", "source_sha256": first.source_sha256, "gguf_sha256": first.sha256}
    assert first.source_sha256 != first.sha256
    assert not list((tmp_path / "a").glob("*.partial"))


def test_a_matching_cached_file_is_reused_without_quantising(shipped, tmp_path, monkeypatch):
    derived = RequantizedGGUF(shipped, "Q4_0", tmp_path)

    def refuse(*args):
        raise AssertionError("quantised again although the cached file matches")

    monkeypatch.setattr(llama_cpp, "llama_model_quantize", refuse)
    again = RequantizedGGUF(shipped, "Q4_0", tmp_path)
    assert again.path == derived.path and again.sha256 == derived.sha256


@pytest.mark.parametrize("damage", ["corrupt file", "other llama.cpp", "no sidecar"])
def test_a_cached_file_that_no_longer_matches_is_derived_again(shipped, tmp_path, damage):
    derived = RequantizedGGUF(shipped, "Q4_0", tmp_path)
    sidecar = derived.path.with_suffix(".json")
    if damage == "corrupt file":
        with open(derived.path, "r+b") as handle:
            handle.seek(derived.path.stat().st_size // 2)
            handle.write(b"\0" * 64)
    elif damage == "other llama.cpp":
        record = json.loads(sidecar.read_text())
        sidecar.write_text(json.dumps({**record, "llama_cpp": "0.0.1"}))
    else:
        sidecar.unlink()
    again = RequantizedGGUF(shipped, "Q4_0", tmp_path)
    assert again.sha256 == derived.sha256
    assert json.loads(sidecar.read_text())["llama_cpp"] == llama_cpp.__version__


def test_an_unknown_type_is_one_clear_error(shipped, tmp_path):
    with pytest.raises(ValueError, match=r"requantize: 'Q3_X' is not one of \['Q4_0'"):
        check_quant_type("Q3_X")
    from src.backends import create_backend

    with pytest.raises(ValueError, match="requantize: 'int4' is not one of"):
        create_backend("llamacpp", model_id="smollm2-135m-gguf", requantize="int4", requantize_dir=str(tmp_path))


def test_the_cache_identity_names_the_requantized_weights(tmp_path):
    from src.backends import create_backend
    from src.backends.cache import CachedBackend, ResponseCache
    from src.core.requests import ChatRequest

    shipped = create_backend("llamacpp", model_id="smollm2-135m-gguf")
    requantized = create_backend(
        "llamacpp", model_id="smollm2-135m-gguf", requantize="Q4_0", requantize_dir=str(tmp_path)
    )
    # issue 48: the weights by content, the engine and the context size, not the file name alone
    assert shipped.cache_identity() == {
        "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "gguf_sha256": hashlib.sha256(shipped.path.read_bytes()).hexdigest(),
        "engine": f"llama-cpp-python {importlib.metadata.version('llama-cpp-python')}",
        "n_ctx": shipped.n_ctx,
    }
    smaller = create_backend("llamacpp", model_id="smollm2-135m-gguf", n_ctx=4096)
    assert smaller.cache_identity()["n_ctx"] == 4096
    identity = requantized.cache_identity()
    assert identity["gguf_file"] == "SmolLM2-135M-Instruct.Q4_1.gguf" and identity["requantize"] == "Q4_0"
    assert identity["gguf_sha256"] == requantized.requantized.sha256 and requantized.path.parent == tmp_path
    cache = ResponseCache(tmp_path / "cache")
    request = ChatRequest((("user", "Text: Monday.\nTime expressions:"),))
    assert CachedBackend(shipped, cache).key_fields(request) != CachedBackend(requantized, cache).key_fields(request)


@pytest.mark.slow
def test_the_requantized_model_answers_the_same_with_and_without_prefix_reuse(tmp_path):
    """Q4_0 runs through llama.cpp's repacked kernels, whose prompt batches differ in size with
    and without reuse: the answers must not depend on it (they are cached and resumed)."""
    from src.backends import create_backend
    from tests.helpers.llamacpp_requests import ARRAY_SCHEMA, strategy_requests

    options = {"model_id": "smollm2-135m-gguf", "n_ctx": 2048, "workers": 1, "requantize": "Q4_0"}
    requests = strategy_requests(schema=ARRAY_SCHEMA) + strategy_requests(task="eventx", schema=ARRAY_SCHEMA)
    reused = create_backend("llamacpp", requantize_dir=str(tmp_path), **options).generate(requests)
    fresh = create_backend("llamacpp", requantize_dir=str(tmp_path), prefix_reuse=False, **options)
    alone = [fresh.generate([request])[0] for request in reversed(requests)][::-1]
    assert sum(r.usage["prompt_tokens_reused"] for r in reused) > 0
    assert [r.text for r in reused] == [r.text for r in alone]
    assert all(isinstance(json.loads(r.text), list) for r in reused)
