"""The HTTP backend against a real OpenAI-compatible server: llama.cpp's, standing in for vLLM.

The server (``python -m llama_cpp.server``) serves the embedded GGUF on 127.0.0.1 and is
stopped when the test ends, whatever happens. The client must send the JSON schema as
``response_format`` in the server's dialect (``json_object`` for llama.cpp's server; the
answer then parses as that schema), reach ``/completions`` for the completion prompt form,
and report the finish reason. With ``schema_format: auto`` it learns the dialect from the
server's refusal of ``json_schema``, once, and its adaptive bound sends a one-slot server
exactly one request per instance (counted in the server's access log).
"""

from __future__ import annotations

import json
import re
import time

import pytest

from src.core.requests import ChatRequest
from tests.helpers.llamacpp_server import llama_server

pytestmark = pytest.mark.slow

SCHEMA = json.dumps({"type": "array", "items": {"type": "string", "enum": ["Friday", "last week", "met"]}})


@pytest.fixture(scope="module")
def server_log(tmp_path_factory):
    """The server's output, with uvicorn's access log: one line per request."""
    return tmp_path_factory.mktemp("llama-server") / "server.log"


def _posts(log) -> list[str]:
    """The status of every POST the server answered so far, in order."""
    return re.findall(r'"POST /v1/chat/completions HTTP/1\.1" (\d{3})', log.read_text(errors="replace"))


@pytest.fixture(scope="module")
def server_url(server_log):
    pytest.importorskip("llama_cpp.server.app", reason="llama-cpp-python's server extras are not installed")
    with llama_server(server_log) as server:
        yield server.url


def _backend(url: str, schema_format: str = "json_object"):
    from src.backends.openai_backend import OpenAIBackend

    return OpenAIBackend(
        model_id="smollm2", base_url=url, max_retries=1, backoff_base_s=0.01, timeout_s=120, schema_format=schema_format
    )


def test_schema_goes_as_response_format_and_the_answer_follows_it(server_url: str):
    request = ChatRequest(
        messages=(("system", "Reply with a JSON array of time expressions."), ("user", "We met last week on Friday.")),
        max_tokens=32,
        response_schema=SCHEMA,
        request_id="chat",
    )
    [result] = _backend(server_url).generate([request])
    assert result.ok, result.error
    answer = json.loads(result.text)
    assert isinstance(answer, list) and set(answer) <= {"Friday", "last week", "met"}
    assert result.finish_reason in ("stop", "length")


def test_the_completion_form_reaches_the_completions_endpoint(server_url: str):
    # llama.cpp's /completions takes no response_format: the schema is not sent there (schema_format none)
    request = ChatRequest(
        messages=(("user", 'Text: We met on Friday.\nTime expressions: ["'),),
        max_tokens=8,
        response_schema=SCHEMA,
        completion=True,
        request_id="completion",
    )
    [result] = _backend(server_url, "none").generate([request])
    assert result.ok, result.error
    assert isinstance(result.text, str) and result.finish_reason in ("stop", "length")


def test_auto_learns_json_object_once_and_a_one_slot_server_gets_one_request_per_instance(server_url, server_log):
    from src.backends.openai_backend import OpenAIBackend

    # The run's defaults (OpenAIOptions): 16 in flight, timeout 120 s, 10 tokens/s.
    backend = OpenAIBackend(
        model_id="smollm2", base_url=server_url, schema_format="auto", max_concurrency=16, min_tokens_per_s=10.0
    )
    texts = ["We met on Friday.", "He left last week.", "They met on Friday last week."] * 2
    requests = [
        ChatRequest(
            messages=(("system", "Reply with a JSON array of time expressions."), ("user", text)),
            max_tokens=16,
            response_schema=SCHEMA,
            request_id=str(i),
        )
        for i, text in enumerate(texts)
    ]
    before = len(_posts(server_log))
    results = backend.generate(requests)
    time.sleep(0.5)  # the access log line follows the response
    statuses = _posts(server_log)[before:]
    assert all(result.ok for result in results), [result.error for result in results]
    assert all(isinstance(json.loads(result.text), list) for result in results if result.finish_reason == "stop")
    # one refusal of json_schema (HTTP 500), then exactly one request per instance
    assert statuses.count("500") == 1 and statuses.count("200") == len(requests) and len(statuses) == len(requests) + 1
    assert backend.schema_form_used == "json_object" and backend.format_refusals == 1
    assert backend.concurrency_stats.decreases == 0  # a queueing server never timed out
