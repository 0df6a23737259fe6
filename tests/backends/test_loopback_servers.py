"""The loopback servers the billing and batch tests trust: what they bill and how they batch."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.helpers.batch_server import BatchServer
from tests.helpers.openai_server import OpenAIServer, quoted_words_answer

BODY = {"model": "m", "messages": [{"role": "user", "content": 'Find "Friday" and "said" here'}]}


def _post(server: OpenAIServer, body: dict = BODY) -> httpx.Response:
    return httpx.post(server.base_url + "/chat/completions", json=body, timeout=10)


@pytest.mark.parametrize(
    "kind, billed", [(None, True), ("no_usage", True), ("refusal", True), ("html", False), ("error_object", False)]
)
def test_the_server_bills_every_completion_it_sent_whole_whatever_the_body_shows(kind, billed):
    with OpenAIServer(answer=quoted_words_answer) as server:
        if kind:
            server.doom("Friday", kind)
        response = _post(server)
    assert response.status_code == 200
    expected = server.usage_of(
        BODY, '["Friday", "said"]' if kind != "refusal" else "I'm sorry, I can't help with that."
    )
    assert server.billed["responses"] == int(billed)
    if billed:
        assert server.billed["prompt_tokens"] == expected["prompt_tokens"] == 5
        assert server.billed["completion_tokens"] == expected["completion_tokens"]
        assert server.billed_cost == pytest.approx(expected["cost"])
    if kind == "no_usage":
        assert "usage" not in response.json()


def test_reply_forms_have_their_shapes():
    with OpenAIServer(answer=quoted_words_answer) as server:
        for kind in ("two_choices", "tool_calls", "stream_body", "refusal"):
            server.doom("Friday", kind)
            response = _post(server)
            if kind == "two_choices":
                assert [c["message"]["content"] for c in response.json()["choices"]] == ["[]", '["Friday", "said"]']
            elif kind == "tool_calls":
                call = response.json()["choices"][0]["message"]["tool_calls"][0]
                assert call["function"]["arguments"] == '["Friday", "said"]'
            elif kind == "stream_body":
                assert response.headers["content-type"].startswith("text/event-stream")
                events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
                joined = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
                assert joined == '["Friday", "said"]' and events[-1]["usage"]["completion_tokens"] == 2
            else:
                assert response.json()["choices"][0]["message"]["refusal"].startswith("I'm sorry")


def _batch_round_trip(server: BatchServer, lines: list[dict]) -> tuple[object, list[dict], list[dict]]:
    client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
    data = ("\n".join(json.dumps(line) for line in lines) + "\n").encode()
    uploaded = client.files.create(file=("in.jsonl", data), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    while batch.status not in ("completed", "expired", "cancelled", "failed"):
        batch = client.batches.retrieve(batch.id)

    def read(file_id):
        return [json.loads(x) for x in client.files.content(file_id).text.splitlines()] if file_id else []

    return batch, read(batch.output_file_id), read(batch.error_file_id)


def _lines(n: int) -> list[dict]:
    return [
        {"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": "m", "messages": [{"role": "user", "content": f'Line {i}: "w{i}"'}]}}
        for i in range(n)
    ]  # fmt: skip


def test_a_batch_round_trip_answers_every_line_and_bills_it():
    with BatchServer(answer=quoted_words_answer, polls_to_complete=2) as server:
        batch, output, errors = _batch_round_trip(server, _lines(3))
    assert batch.status == "completed" and errors == [] and server.polls[batch.id] == 2
    assert [o["custom_id"] for o in output] == ["r0", "r1", "r2"]
    assert [o["response"]["body"]["choices"][0]["message"]["content"] for o in output] == ['["w0"]', '["w1"]', '["w2"]']
    assert "cost" not in output[0]["response"]["body"]["usage"] and server.billed["responses"] == 3
    assert server.batch_lines == {"r0": 1, "r1": 1, "r2": 1} and len(server.uploads) == 1


@pytest.mark.parametrize("end, code", [("expired", "batch_expired"), ("cancelled", "batch_cancelled")])
def test_an_expired_or_cancelled_batch_answers_some_lines_and_names_the_rest(end, code):
    with BatchServer(answer=quoted_words_answer) as server:
        (server.expire_next if end == "expired" else server.cancel_next)(done=1)
        batch, output, errors = _batch_round_trip(server, _lines(3))
    assert batch.status == end and [o["custom_id"] for o in output] == ["r0"]
    assert [(e["custom_id"], e["error"]["code"]) for e in errors] == [("r1", code), ("r2", code)]


def test_line_failures_and_validation_failures():
    with BatchServer(answer=quoted_words_answer) as server:
        server.fail_in_batch('"w1"', status=500)
        batch, output, errors = _batch_round_trip(server, _lines(3))
        assert batch.status == "completed" and [e["custom_id"] for e in errors] == ["r1"]
        assert errors[0]["response"]["status_code"] == 500
        duplicated = _lines(2) + _lines(1)
        batch, output, errors = _batch_round_trip(server, duplicated)
    assert batch.status == "failed" and batch.errors.data[0].code == "duplicate_custom_id" and output == []
