"""What one batch may hold per dialect, and how result lines a provider should not send are read:
a repeated ``custom_id`` keeps its first answer, a line without one is counted, never keyed "None";
a line's failure cause is scrubbed of the key before it is logged."""

from __future__ import annotations

from types import SimpleNamespace

from src.backends.batch_apis import BatchView, FileBatches, InlineBatches
from src.backends.openai_batch import BatchCall, split_by_limits
from src.backends.openai_keys import scrubbed


def _api(kind, batch_max_requests: int = 50_000):
    return kind(SimpleNamespace(batch_max_requests=batch_max_requests, seed=0), client=None)


def test_each_dialect_has_its_providers_limits_and_the_setting_only_lowers_them():
    assert _api(InlineBatches).limits == (5_000, 200_000_000)  # OpenRouter's Batch API guide
    assert _api(FileBatches).limits == (50_000, 200_000_000)  # OpenAI's Batch API reference
    assert _api(InlineBatches, 100).limits == (100, 200_000_000)
    assert _api(FileBatches, 80_000).limits == (50_000, 200_000_000)


def test_lines_are_split_by_count_and_by_bytes():
    # brute force: every chunk within both limits, every line once and in order, no chunk could take the next line
    sizes = [30, 50, 20, 90, 10, 10, 10, 60, 5]
    chunks = split_by_limits(sizes, 3, 100)
    assert [i for chunk in chunks for i in chunk] == list(range(len(sizes)))
    for number, chunk in enumerate(chunks):
        assert len(chunk) <= 3 and sum(sizes[i] for i in chunk) <= 100
        if number + 1 < len(chunks):
            following = chunks[number + 1][0]
            assert len(chunk) == 3 or sum(sizes[i] for i in chunk) + sizes[following] > 100
    assert chunks == [[0, 1, 2], [3, 4], [5, 6, 7], [8]]
    assert len(split_by_limits([1] * 12_000, 5_000, 200_000_000)) == 3


def _line(custom_id, status: int, text: str = "x") -> dict:
    return {"custom_id": custom_id, "response": {"status_code": status, "body": {"text": text}}, "error": None}


def test_a_repeated_custom_id_keeps_its_first_answer_and_an_unnamed_line_is_counted():
    api, items = _api(FileBatches), {}
    for item in (
        _line("a", 500),
        _line("a", 200, "first"),
        _line("a", 200, "second"),
        _line("b", 200),
        _line("b", 500),
        _line(None, 200),
        {"response": None},
        "not an object",
    ):
        api.keep(items, item)
    assert items["a"]["response"]["body"]["text"] == "first"  # an answer over an error line, then the first answer
    assert items["b"]["response"]["status_code"] == 200
    assert set(items) == {"a", "b"} and "None" not in items
    assert api.duplicates == ["a"] and api.unnamed == 3


def test_a_batch_lines_failure_cause_is_scrubbed_of_the_key_and_uri_credentials():
    key = "sk-or-v1-" + "0123456789abcdef" * 4
    call = object.__new__(BatchCall)
    call.backend = SimpleNamespace(meter=None, _redact=lambda text: scrubbed(text, key))
    call.requests, call.causes = [None], {}
    echoed = {"message": f"bad key {key[-12:]} for https://alice:s3cret@proxy.example/v1"}
    item = {"custom_id": "a", "response": {"status_code": 401, "body": {"error": echoed}}, "error": None}
    assert not call._collect(0, item, None, BatchView("b", "completed"))
    assert call.causes[0].startswith("HTTP 401: bad key ***")
    assert key[-12:] not in call.causes[0] and "s3cret" not in call.causes[0] and "alice" not in call.causes[0]
