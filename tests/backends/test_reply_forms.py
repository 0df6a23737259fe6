"""Every form a 200 can take has one meaning (src/backends/openai_reply.py): an answer, a refusal,
or a fault that names itself, and a fault billed by the provider carries what it billed."""

from __future__ import annotations

import json

import httpx
import pytest

from src.backends.openai_reply import NeverHeals, RetryableError, parse_completion

USAGE = {"prompt_tokens": 12, "completion_tokens": 5, "cost": 0.00002}


def _reply(
    message: dict | None = None, *, choices: list | None = None, usage: dict | None = USAGE, **top
) -> httpx.Response:
    if choices is None:
        choices = [{"index": 0, "message": message, "finish_reason": top.pop("finish_reason", "stop")}]
    body = {"id": "c", "model": "m", "choices": choices, **top}
    if usage is not None:
        body["usage"] = usage
    return httpx.Response(200, json=body)


def test_content_is_the_answer_and_a_refusal_is_the_models_answer_too():
    reply = parse_completion(_reply({"role": "assistant", "content": '["Friday"]'}))
    assert (reply.text, reply.refusal, reply.source) == ('["Friday"]', None, "content")
    assert reply.billed.usage == USAGE
    refused = parse_completion(_reply({"role": "assistant", "content": None, "refusal": "I can't help with that."}))
    assert (refused.text, refused.refusal, refused.source) == ("", "I can't help with that.", "refusal")
    assert refused.billed.usage == USAGE and "can't help" in refused.billed.generated_text


def test_an_answer_in_one_tool_call_or_a_function_call_is_read_and_several_are_named():
    call = {"id": "call_0", "type": "function", "function": {"name": "answer", "arguments": '{"spans": ["May"]}'}}
    reply = parse_completion(
        _reply({"role": "assistant", "content": None, "tool_calls": [call]}, finish_reason="tool_calls")
    )
    assert (reply.text, reply.source) == ('{"spans": ["May"]}', "tool_calls")
    legacy = parse_completion(
        _reply({"role": "assistant", "content": None, "function_call": {"name": "a", "arguments": "[1]"}})
    )
    assert (legacy.text, legacy.source) == ("[1]", "function_call")
    with pytest.raises(NeverHeals, match="split over 2 tool calls") as fault:
        parse_completion(_reply({"role": "assistant", "content": None, "tool_calls": [call, call]}))
    assert fault.value.billed is not None and fault.value.billed.usage == USAGE


def test_more_choices_than_asked_is_a_billed_fault_never_the_first_taken():
    choices = [
        {"index": 0, "message": {"role": "assistant", "content": "[]"}, "finish_reason": "stop"},
        {"index": 1, "message": {"role": "assistant", "content": '["May"]'}, "finish_reason": "stop"},
    ]
    with pytest.raises(NeverHeals, match="2 choices where 1 was asked") as fault:
        parse_completion(_reply(choices=choices))
    assert fault.value.kind == "several choices" and fault.value.billed.generated_text == '[]["May"]'


def test_an_event_stream_body_is_joined_into_its_answer():
    chunks = [
        {
            "id": "c",
            "model": "m",
            "provider": "DeepInfra",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": '["Fri'}}],
        },
        {"id": "c", "choices": [{"index": 0, "delta": {"content": 'day"]'}}]},
        {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"id": "c", "choices": [], "usage": USAGE},
    ]
    body = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"
    response = httpx.Response(200, content=body.encode(), headers={"content-type": "text/event-stream"})
    reply = parse_completion(response)
    assert (reply.text, reply.finish_reason, reply.source) == ('["Friday"]', "stop", "content+stream")
    assert reply.usage == USAGE and reply.served == {"model": "m", "provider": "DeepInfra"}


def test_only_reasoning_null_content_and_no_choices_are_named_faults_and_billed():
    with pytest.raises(NeverHeals, match="only reasoning") as fault:
        parse_completion(
            _reply({"role": "assistant", "content": None, "reasoning": "Let me think"}, finish_reason="length")
        )
    assert fault.value.billed.generated_text == "Let me think"
    with pytest.raises(RetryableError, match="null content") as fault:
        parse_completion(_reply({"role": "assistant", "content": None}))
    assert fault.value.billed is not None
    with pytest.raises(RetryableError, match="response without choices") as fault:
        parse_completion(_reply(choices=[]))
    assert fault.value.billed is not None  # a completion object with usage: the provider billed it


def test_bodies_that_carry_no_completion_are_not_billed():
    for response in (
        httpx.Response(200, content=b"<html>502</html>", headers={"content-type": "text/html"}),
        httpx.Response(200, json={"error": {"message": "upstream"}}),
    ):
        with pytest.raises(RetryableError) as fault:
            parse_completion(response)
        assert fault.value.billed is None


def test_a_reply_without_usage_is_billed_with_an_empty_usage_to_estimate():
    reply = parse_completion(_reply({"role": "assistant", "content": '["May"]'}, usage=None))
    assert reply.billed.usage == {} and reply.billed.generated_text == '["May"]'


@pytest.mark.parametrize(
    "kind, error",
    [
        (
            "two_choices",
            "gave up after 2 attempts: reply has 2 choices where 1 was asked (none is taken); retrying does not heal this",
        ),
        ("reasoning_only", "gave up after 2 attempts: no answer, only reasoning"),
    ],
)
def test_a_reply_form_that_is_no_answer_is_retried_once_then_named_and_its_attempts_billed(kind, error):
    from src.backends.openai_backend import OpenAIBackend
    from src.core.requests import ChatRequest
    from tests.helpers.openai_server import OpenAIServer, quoted_words_answer

    with OpenAIServer(answer=quoted_words_answer) as server:
        server.doom("Friday", kind)
        backend = OpenAIBackend(model_id="m", base_url=server.base_url, backoff_base_s=0.0, backoff_max_s=0.0)
        (result,) = backend.generate([ChatRequest(messages=(("user", 'Find "Friday"'),), request_id="x")])
        billed = server.billed["responses"]
    assert result.text is None and result.error.startswith(error)
    assert result.bill.attempts == result.bill.billed_attempts == billed == 2


def test_answers_read_from_a_tool_call_or_an_event_stream_say_where_they_came_from():
    from src.backends.openai_backend import OpenAIBackend
    from src.core.requests import ChatRequest
    from tests.helpers.openai_server import OpenAIServer, quoted_words_answer

    with OpenAIServer(answer=quoted_words_answer) as server:
        backend = OpenAIBackend(model_id="m", base_url=server.base_url)
        for kind, source in (("tool_calls", "tool_calls"), ("stream_body", "content+stream")):
            server.doom("Friday", kind)
            (result,) = backend.generate([ChatRequest(messages=(("user", f'Find "Friday" {kind}'),))])
            assert result.text == '["Friday"]' and result.served["answer_from"] == source and result.attempts == 1


def test_text_beside_a_tool_call_is_a_named_fault_never_the_call_dropped():
    call = {"id": "call_0", "type": "function", "function": {"name": "answer", "arguments": '["May"]'}}
    with pytest.raises(NeverHeals, match="text and 1 tool call") as fault:
        parse_completion(_reply({"role": "assistant", "content": '["Friday"]', "tool_calls": [call]}))
    assert fault.value.kind == "text and tool calls" and fault.value.billed.usage == USAGE
    legacy = {"role": "assistant", "content": "[]", "function_call": {"name": "a", "arguments": "[1]"}}
    with pytest.raises(NeverHeals, match="text and 1 tool call"):
        parse_completion(_reply(legacy))
    blank = parse_completion(_reply({"role": "assistant", "content": "", "tool_calls": [call]}))
    assert (blank.text, blank.source) == ('["May"]', "tool_calls")  # blank text: the call is the answer


@pytest.mark.parametrize(
    "usage, counted, odd",
    [
        ({"prompt_tokens": "12", "completion_tokens": "5", "cost": "0.002"}, (12, 5, 0.002), 0),
        ({"prompt_tokens": 12.0, "completion_tokens": 5, "cost": 0}, (12, 5, 0.0), 0),
        ({"prompt_tokens": True, "completion_tokens": -1, "cost": "NaN"}, (None, None, None), 3),
        ({"prompt_tokens": 12.5, "completion_tokens": "five", "cost": "1e999"}, (None, None, None), 3),
        (
            {"prompt_tokens": 3, "completion_tokens": 1, "completion_tokens_details": {"reasoning_tokens": -2}},
            (3, 1, None),
            1,
        ),  # fmt: skip
    ],
)
def test_a_providers_figures_are_checked_converted_or_named_never_raised(usage, counted, odd):
    reply = parse_completion(_reply({"role": "assistant", "content": '["May"]'}, usage=usage))
    checked = reply.billed.usage
    assert (checked.get("prompt_tokens"), checked.get("completion_tokens"), checked.get("cost")) == counted
    assert len(reply.billed.odd) == odd and reply.usage == checked
    assert all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in checked.values() if v is not None)
