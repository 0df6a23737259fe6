"""``adv_p`` acceptance logic against a loopback OpenAI-compatible server: accept, retry, drop."""

from __future__ import annotations

import json
import re

import pytest

from src.data.schema import Record, Span, check_spans, read_records, write_records
from src.derive import adv_p
from src.derive.adv_p import check_rewrite, extract_rewrite, rewrite_request
from src.derive.alignment import AlignmentError
from src.backends.base import ChatRequest
from tests.backends.fake_openai_server import FakeOpenAIServer, last_user_message


def make_record(id_: str, text: str, *strings: str) -> Record:
    spans, cursor = [], 0
    for string in strings:
        start = text.index(string, cursor)
        spans.append(Span(start, start + len(string), string, "TIMEX"))
        cursor = start + len(string)
    return Record(id_, "doc", text, spans, "test")


GOOD = make_record("good", "The company reported higher sales on Monday.", "Monday")
BROKEN = make_record("broken", "Prices fell sharply last week.", "last week")
AMBIGUOUS = make_record("ambiguous", "In May the plant reopened.", "May")
UNCHANGED = make_record("unchanged", "He left in 1990.", "1990")
TWICE = make_record("twice", "Sales rose in May and fell in May.", "May", "May")

# what the fake model answers, per sentence: first attempt, later attempts
ANSWERS = {
    GOOD.text: ("Rewritten sentence: \"On Monday the firm reportted bigger sales.\"", None),
    BROKEN.text: ("Prices dropped steeply the previous week.", "Prices dropped last weak."),
    AMBIGUOUS.text: ("In May, as expected in May, the plant opened again.", "The factory reopened in May."),
    UNCHANGED.text: ("He left in 1990.", "He left in 1990."),
    TWICE.text: ("In May sales grew, and in May they fell.", None),
}


def fake_model(body: dict) -> str:
    message = last_user_message(body)
    sentence = message.rsplit("Sentence: ", 1)[1]
    first, later = ANSWERS[sentence]
    return later if re.search(r"Attempt \d+:", message) and later is not None else first


def test_request_names_targets_and_varies_by_attempt_only_in_the_prompt():
    first, second = rewrite_request(TWICE, 0, seed=5), rewrite_request(TWICE, 1, seed=5)
    assert isinstance(first, ChatRequest) and first.temperature == 0.0 and first.seed == 5
    prompt = first.messages[-1][1]
    assert prompt.count('- "May"') == 2 and prompt.endswith(f"Sentence: {TWICE.text}")
    assert "Attempt 2:" in second.messages[-1][1] and first.messages != second.messages
    assert first.request_id == "twice#attempt1"


def test_extract_rewrite_strips_labels_quotes_and_fences():
    assert extract_rewrite('Rewrite: "A new text."\nExplanation: ...') == "A new text."
    assert extract_rewrite("```\nA fenced text.\n```") == "A fenced text."
    assert extract_rewrite(None) == "" and extract_rewrite("  \n ") == ""


def test_check_rewrite_reasons():
    accepted = check_rewrite(TWICE, "In May sales grew, and in May they fell.", {"k": 1})
    assert [s.start for s in accepted.spans] == [3, 26] and accepted.extra == {"k": 1}
    for rewrite, reason in [("", "empty"), ("He  left in 1990 .", "unchanged"), ("He went away.", "missing"),
                            ("He left in 1990, yes 1990.", "ambiguous"), ("1990 " * 30, "length"),
                            ('- "1990"', "length")]:
        with pytest.raises(AlignmentError) as caught:
            check_rewrite(UNCHANGED, rewrite, {})
        assert caught.value.reason == reason, rewrite


def test_loopback_server_accepts_retries_and_drops(tmp_path):
    base = tmp_path / "base.jsonl"
    write_records(base, [GOOD, BROKEN, AMBIGUOUS, UNCHANGED, TWICE])
    out, stats_path, cache = tmp_path / "adv_p.jsonl", tmp_path / "stats.json", tmp_path / "cache"
    argv = ["--input", str(base), "--output", str(out), "--backend", "openai", "--model-id", "fake-rewriter",
            "--seed", "3", "--max-attempts", "3", "--cache-dir", str(cache), "--stats", str(stats_path)]
    with FakeOpenAIServer(answer=fake_model) as server:
        adv_p.main(argv + ["--option", f"base_url={server.base_url}", "--option", "max_retries=0"])
        # good, twice: 1 request each; ambiguous: 2; broken, unchanged: 3 each (then dropped)
        assert server.request_count == 10
        assert all(body["temperature"] == 0 for body in server.bodies)

        derived = read_records(out)
        assert [r.id for r in derived] == ["good", "ambiguous", "twice"]
        for record in derived:
            check_spans(record.text, record.spans, record.id)
        good, ambiguous, _ = derived
        assert good.text == "On Monday the firm reportted bigger sales."
        assert good.extra["generator"] == {"backend": "openai", "model_id": "fake-rewriter"}
        assert good.extra["original_text"] == GOOD.text and good.extra["attempts"] == 1
        assert ambiguous.extra["attempts"] == 2 and ambiguous.spans[0].start == 24

        stats = json.loads(stats_path.read_text())
        assert stats["instances"] == 5 and stats["accepted"] == 3 and stats["dropped"] == 2
        assert stats["acceptance_rate"] == pytest.approx(0.6)
        assert stats["accepted_by_attempt"] == {"1": 2, "2": 1}
        assert stats["rejection_reasons"] == {"ambiguous": 1, "missing": 3, "unchanged": 3}
        assert stats["requests"] == 10 and stats["cached_responses"] == 0

        # a rerun is answered by the cache: no request reaches the server
        adv_p.main(argv + ["--option", f"base_url={server.base_url}", "--option", "max_retries=0"])
        assert server.request_count == 10
        assert json.loads(stats_path.read_text())["cached_responses"] == 10
        assert [r.to_dict() for r in read_records(out)] == [r.to_dict() for r in derived]
