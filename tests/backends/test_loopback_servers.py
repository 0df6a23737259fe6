"""The loopback servers the billing and batch tests trust: what they bill and how they batch."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.helpers.batch_server import BatchServer
from tests.helpers.openai_server import OpenAIServer, quoted_words_answer

ROOT = Path(__file__).resolve().parents[2]
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


def _wait_until_served(server: OpenAIServer, n: int = 1) -> None:
    """The handler thread records a status after the client already has its reply (or gave up)."""
    deadline = time.monotonic() + 5
    while len(server.statuses) < n and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.mark.parametrize("kind", ["500", "429", "truncated", "truncated_json", "bad_gzip", "reset", "hang"])
def test_no_completion_reaching_the_client_is_billed(kind):
    with OpenAIServer(answer=quoted_words_answer, hang_s=0.3) as server:
        server.doom("Friday", kind)
        try:
            _post(server).json()
        except (httpx.HTTPError, ValueError):
            pass
        _wait_until_served(server)
        assert server.billed["responses"] == 0 and server.billed_cost == 0 and not server.billed_by_prompt
        assert server.served_faults[kind] == 1 and not server.answers


def test_a_client_that_stops_reading_halfway_is_not_billed():
    with OpenAIServer(answer=quoted_words_answer, drip_s=2.0) as server:
        server.doom("Friday", "slow_drip")
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(server.base_url + "/chat/completions", json=BODY, timeout=httpx.Timeout(5, read=0.05))
        _wait_until_served(server)
    assert server.statuses == [499] and server.billed["responses"] == 0 and not server.answers


def test_token_counting_and_prices_are_the_servers_and_bills_count_per_prompt():
    with OpenAIServer(
        answer=quoted_words_answer, count_tokens=len, price_in_per_token=2e-6, price_out_per_token=3e-6
    ) as server:
        shown = _post(server).json()["usage"]
        server.doom("Friday", "no_cost")
        _post(server)
    prompt = BODY["messages"][0]["content"]
    assert shown["prompt_tokens"] == len(prompt) and shown["completion_tokens"] == len('["Friday", "said"]')
    assert shown["cost"] == pytest.approx(2e-6 * len(prompt) + 3e-6 * len('["Friday", "said"]'))
    assert server.billed == {"responses": 2, "prompt_tokens": 2 * len(prompt), "completion_tokens": 36}
    assert server.billed_cost == pytest.approx(2 * shown["cost"]) and server.billed_by_prompt == {prompt: 2}


@pytest.mark.parametrize(
    "kind, answered",
    [("no_usage", 1), ("no_cost", 1), ("parts", 1), ("tool_calls", 1), ("stream_body", 1)]
    + [("two_choices", 0), ("refusal", 0), ("reasoning_only", 0), ("null_content", 0)],
)
def test_only_replies_carrying_the_right_answer_readably_count_as_answers(kind, answered):
    with OpenAIServer(answer=quoted_words_answer) as server:
        server.doom("Friday", kind)
        _post(server)
        _wait_until_served(server)
    assert sum(server.answers.values()) == answered and server.billed["responses"] == 1


def test_refusal_and_reasoning_only_bill_the_text_the_model_generated():
    with OpenAIServer(answer=quoted_words_answer) as server:
        server.doom("Friday", "reasoning_only")
        reasoning = _post(server).json()
        server.doom("Friday", "no_cost")
        no_cost = _post(server).json()
    choice = reasoning["choices"][0]
    assert choice["finish_reason"] == "length" and choice["message"]["content"] is None
    assert reasoning["usage"]["completion_tokens"] == len(choice["message"]["reasoning"].split())
    assert "cost" not in no_cost["usage"] and no_cost["choices"][0]["message"]["content"] == '["Friday", "said"]'


def test_completions_bodies_get_the_same_reply_kinds():
    body = {"model": "m", "prompt": 'Find "Friday" and "said" here'}
    with OpenAIServer(answer=quoted_words_answer) as server:
        replies = {}
        for kind in ("null_content", "two_choices", "refusal", "stream_body"):
            server.doom("Friday", kind)
            replies[kind] = httpx.post(server.base_url + "/completions", json=body, timeout=10)
    assert replies["null_content"].json()["choices"][0]["text"] is None
    assert [c["text"] for c in replies["two_choices"].json()["choices"]] == ["[]", '["Friday", "said"]']
    refusal = replies["refusal"].json()["choices"][0]
    assert "text" not in refusal and refusal["message"]["refusal"] == "I'm sorry, I can't help with that."
    events = [json.loads(line[6:]) for line in replies["stream_body"].text.splitlines() if line.startswith("data: {")]
    assert "".join(e["choices"][0]["text"] for e in events if e["choices"]) == '["Friday", "said"]'
    assert server.billed["responses"] == 4 and server.billed["prompt_tokens"] == 4 * 5


def test_the_cancel_endpoint_cancels_at_the_next_poll_with_every_line_in_the_error_file():
    with BatchServer(answer=quoted_words_answer) as server:
        server.hold()
        client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        data = ("\n".join(json.dumps(line) for line in _lines(2)) + "\n").encode()
        uploaded = client.files.create(file=("in.jsonl", data), purpose="batch")
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        for _ in range(3):
            assert client.batches.retrieve(batch.id).status == "in_progress"
        assert client.batches.cancel(batch.id).status == "cancelling"
        cancelled = client.batches.retrieve(batch.id)
        errors = [json.loads(x) for x in client.files.content(cancelled.error_file_id).text.splitlines()]
    assert uploaded.filename == "in.jsonl" and uploaded.bytes == len(data)
    assert cancelled.status == "cancelled" and cancelled.output_file_id is None and server.cancel_requests == [batch.id]
    assert [(e["custom_id"], e["error"]["code"]) for e in errors] == [
        ("r0", "batch_cancelled"),
        ("r1", "batch_cancelled"),
    ]
    assert server.polls[batch.id] == 4 and server.billed["responses"] == 0


def test_batch_lines_meet_the_reply_kinds_and_bill_at_the_batch_price():
    with BatchServer(answer=quoted_words_answer) as server:
        server.doom('"w0"', "refusal")
        server.doom('"w1"', "500")
        batch, output, errors = _batch_round_trip(server, _lines(3))
        sync_cost = server.usage_of(_lines(3)[2]["body"], '["w2"]')["cost"]
    refusal = output[0]["response"]["body"]["choices"][0]["message"]
    assert [o["custom_id"] for o in output] == ["r0", "r2"] and refusal["refusal"].startswith("I'm sorry")
    assert [(e["custom_id"], e["response"]["status_code"]) for e in errors] == [("r1", 500)]
    assert batch.request_counts.completed == 2 and batch.request_counts.failed == 1
    assert server.billed["responses"] == server.batch_billed["responses"] == 2
    assert server.billed_by_prompt == {'Line 0: "w0"': 1, 'Line 2: "w2"': 1} and server.answers == {'Line 2: "w2"': 1}
    refusal_cost = server.usage_of(_lines(3)[0]["body"], "I'm sorry, I can't help with that.")["cost"]
    assert server.billed_cost == pytest.approx((sync_cost + refusal_cost) / 2)


def test_validation_failures_unknown_files_and_wrong_urls():
    with BatchServer(answer=quoted_words_answer) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        with pytest.raises(openai.NotFoundError):
            client.batches.create(input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h")
        wrong_url = _lines(2)
        wrong_url[1]["url"] = "/v1/completions"
        batch, output, _ = _batch_round_trip(server, wrong_url)
        assert batch.status == "failed" and [e.line for e in batch.errors.data] == [2] and output == []
        server.fail_next_validation()
        batch, output, errors = _batch_round_trip(server, _lines(1))
        assert batch.status == "failed" and batch.output_file_id is None and batch.errors.data
    assert server.batch_lines == {} and server.billed["responses"] == 0


def test_the_batch_server_in_its_own_process_takes_control_and_reports_stats():
    command = [sys.executable, "-m", "tests.helpers.batch_server", "--polls-to-complete", "1", "--hold"]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        base_url = process.stdout.readline().strip()
        client = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0)
        data = (json.dumps(_lines(1)[0]) + "\n").encode()
        uploaded = client.files.create(file=("in.jsonl", data), purpose="batch")
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        assert client.batches.retrieve(batch.id).status == "in_progress"
        assert httpx.post(base_url + "/_control", json={"hold": False}).json() == {"held": False}
        assert client.batches.retrieve(batch.id).status == "completed"
        stats = httpx.get(base_url + "/_stats").json()
    finally:
        process.stdin.close()
        process.wait(timeout=5)
    assert stats["uploads"] == 1 and stats["created"] == [batch.id] and stats["polls"] == {batch.id: 2}
    assert stats["batch_lines"] == {"r0": 1} and stats["billed"]["responses"] == 1
