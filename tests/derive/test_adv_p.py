"""``adv_p``: edit kinds, the JSON answer format, every rejection reason, the rule fallback.

The generator is a scripted test double (``generate(requests, progress, on_result)``): the real
model's answers cannot be chosen, and what is tested here is what ``adv_p`` does with them. The
similarity is scripted too, except in the slow test, which runs the embedded model and MiniLM.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from src.backends.base import Backend, GenerationResult
from src.billing.ledger import read_ledger
from src.core.requests import ChatRequest
from src.data.schema import Record, Span, check_spans, read_records, write_records
from src.derive import adv_p
from src.derive.adv_p import RewriteSettings, rewrite_records
from src.derive.alignment import AlignmentError
from src.derive.rewrite_checks import check_rewrite, has_typo
from src.derive.rewrite_prompts import (
    EDIT_KINDS,
    KIND_PROMPTS,
    RESPONSE_SCHEMA,
    RESPONSE_SCHEMA_TEXT,
    instance_kinds,
    parse_rewrite,
    rewrite_request,
)
from src.derive.typo_rule import RULE_KIND
from tests.helpers.openai_server import OpenAIServer, last_user_message

ROOT = Path(__file__).resolve().parents[2]


def make_record(id_: str, text: str, *strings: str) -> Record:
    spans, cursor = [], 0
    for string in strings:
        start = text.index(string, cursor)
        spans.append(Span(start, start + len(string), string, "TIMEX"))
        cursor = start + len(string)
    return Record(id_, "doc", text, spans, "test")


def answer(text: str) -> str:
    return json.dumps({"rewritten": text})


def sentence_of(request: ChatRequest) -> str:
    return request.messages[-1][1].rsplit("Sentence: ", 1)[1]


def kind_of(request: ChatRequest) -> str:
    return request.request_id.rsplit(":", 1)[1]


class ScriptedBackend(Backend):
    """Answers by (sentence, edit kind) from a script; records every request it gets."""

    name = "scripted"
    model_id = "scripted-rewriter"

    def __init__(self, script: dict[str, dict[str, str | None]], finish_reason: str = "stop"):
        self.script = script
        self.finish_reason = finish_reason
        self.requests: list[ChatRequest] = []

    def cache_identity(self) -> dict:
        return {}

    def generate(self, requests, progress=None, on_result=None):
        results = []
        for index, request in enumerate(requests):
            self.requests.append(request)
            text = self.script[sentence_of(request)].get(kind_of(request), '{"rewritten": "x"}')
            result = (
                GenerationResult(request, None, error="boom")
                if text is None
                else GenerationResult(request, text, finish_reason=self.finish_reason)
            )
            results.append(result)
            if on_result is not None:
                on_result(index, result)
        return results


def scripted_similarity(low: set[str] = frozenset()):
    """1.0 for every pair, except rewrites listed in ``low`` (0.1)."""

    def similarity(originals, rewrites):
        return [0.1 if r in low else 1.0 for r in rewrites]

    return similarity


RECORD = make_record("r", "The company reported higher sales on Monday.", "Monday")
TWO = make_record("two", "Prices fell last week and rose on Friday.", "last week", "Friday")


def test_request_sends_schema_kind_example_and_targets():
    request = rewrite_request(TWO, 0, seed=5, kind="char_noise")
    assert isinstance(request, ChatRequest) and request.temperature == 0.0 and request.seed == 5
    assert request.response_schema == json.dumps(RESPONSE_SCHEMA, sort_keys=True, separators=(",", ":"))
    assert json.loads(request.response_schema)["required"] == ["rewritten"]
    roles = [role for role, _ in request.messages]
    assert roles == ["system", "user", "assistant", "user"]
    assert json.loads(request.messages[2][1]) == {"rewritten": KIND_PROMPTS["char_noise"][3]}
    prompt = request.messages[-1][1]
    assert '"last week", "Friday"' in prompt and "typos" in prompt and sentence_of(request) == TWO.text
    assert request.request_id == "two#attempt1:char_noise"
    # the kinds give different prompts; a repeated kind says its attempt number
    others = {rewrite_request(TWO, 0, 5, k).messages for k in EDIT_KINDS}
    assert len(others) == 3
    repeat = rewrite_request(TWO, 3, 5, "char_noise")
    assert repeat.messages != request.messages and "Attempt 4" in repeat.messages[-1][1]


def test_instance_kinds_cycle_from_a_seeded_start():
    kinds = instance_kinds("a", 13)
    assert sorted(kinds) == sorted(EDIT_KINDS) and kinds == instance_kinds("a", 13)
    starts = {instance_kinds(f"id{i}", 13)[0] for i in range(30)}
    assert starts == set(EDIT_KINDS)


def test_parse_rewrite_is_strict():
    assert parse_rewrite(' {"rewritten": " A new text. "}\n') == "A new text."
    for raw in [
        None,
        "",
        "A new text.",
        'Answer: {"rewritten": "x"}',
        '```json\n{"rewritten": "x"}\n```',
        '{"rewritten": 3}',
        '["x"]',
        '{"rewritten": "x", "note": "y"}',
        '{"rewritten": "x"',
    ]:
        with pytest.raises(AlignmentError) as caught:
            parse_rewrite(raw)
        assert caught.value.reason == "format", raw


def test_check_rewrite_reasons():
    accepted = check_rewrite(TWO, "Prices dropped last week and went up on Friday.", {"k": 1})
    assert [(s.text, s.start) for s in accepted.spans] == [("last week", 15), ("Friday", 40)]
    assert accepted.extra == {"k": 1}
    record = make_record("u", "He left in 1990 after the war.", "1990")
    cases = [
        ("", "empty"),
        ("He  left in 1990 after the war .", "unchanged"),
        ("He went away after the war.", "missing_span"),
        ("He left in 1990, yes 1990, after the war.", "ambiguous"),
        ("He left in 1990 after the war " + "and then more " * 5, "length"),
        ("1990 war.", "length"),
        ("He left in1990 after the war.", "missing_span"),
    ]
    for rewrite, reason in cases:
        with pytest.raises(AlignmentError) as caught:
            check_rewrite(record, rewrite, {})
        assert caught.value.reason == reason, rewrite
    with pytest.raises(AlignmentError) as caught:
        check_rewrite(TWO, "On Friday prices rose, after they fell last week.", {})
    assert caught.value.reason == "order"


def run(records, script, settings=None, low=frozenset(), **backend_kwargs):
    backend = ScriptedBackend(script, **backend_kwargs)
    settings = settings or RewriteSettings(max_attempts=3, seed=13)
    outcome = rewrite_records(records, backend, settings, scripted_similarity(set(low)))
    return backend, outcome, adv_p.summarize(outcome, backend, settings)


ORIGINAL = "The company reported higher sales on Monday."
REASON_ANSWERS = {
    "format": "The firm reported bigger sales on Monday.",  # plain text, not JSON
    "empty": answer("  "),
    "unchanged": answer(ORIGINAL),
    "length": answer("On Monday."),
    "missing_span": answer("The firm reported bigger sales on Tuesday."),
    "ambiguous": answer("On Monday the firm reported bigger sales on Monday."),
    "similarity": answer("The compnay reported lower sales on Monday."),
    "numbers": answer("The firm reported 3% higher sales on Monday."),
    "deletion": answer("The company reported sales on Monday."),
    "generation_error": None,
}


@pytest.mark.parametrize("reason", sorted(REASON_ANSWERS))
def test_each_rejection_is_counted_with_its_reason(reason):
    record = make_record("r", ORIGINAL, "Monday")
    script = {ORIGINAL: {kind: REASON_ANSWERS[reason] for kind in EDIT_KINDS}}
    low = {"The compnay reported lower sales on Monday."}
    backend, outcome, stats = run([record], script, low=low)
    assert outcome.accepted == [] and outcome.dropped_ids == ["r"]
    assert stats["rejection_reasons"] == {reason: 3}
    assert sum(stats["rejection_reasons_by_kind"][k][reason] for k in EDIT_KINDS) == 3
    assert stats["acceptance_rate"] == 0.0 and stats["requests"] == 3
    assert sorted(kind_of(r) for r in backend.requests) == sorted(EDIT_KINDS)


def test_order_rejection_is_counted():
    script = {TWO.text: {k: answer("On Friday prices rose, after they fell last week.") for k in EDIT_KINDS}}
    _, _, stats = run([TWO], script)
    assert stats["rejection_reasons"] == {"order": 3}


def test_char_noise_answer_without_a_typo_is_a_kind_rejection():
    synonyms = answer("The firm announced bigger sales on Monday.")
    typos = answer("The compnay reported higher slaes on Monday.")
    _, outcome, stats = run(
        [make_record("r", ORIGINAL, "Monday")],
        {ORIGINAL: {k: synonyms for k in EDIT_KINDS}},
        RewriteSettings(max_attempts=1, seed=1, kinds=("char_noise",)),
    )
    assert outcome.accepted == [] and stats["rejection_reasons"] == {"kind": 1}
    _, outcome, _ = run(
        [make_record("r", ORIGINAL, "Monday")],
        {ORIGINAL: {k: typos for k in EDIT_KINDS}},
        RewriteSettings(max_attempts=1, seed=1, kinds=("char_noise",)),
    )
    assert outcome.accepted[0].extra["edit_kind"] == "char_noise"
    assert has_typo(ORIGINAL, "The compnay reported higher sales on Monday.")
    assert not has_typo(ORIGINAL, "The firm reported higher sales on Monday.")


def test_numbers_must_be_kept():
    record = make_record("n", "Net income rose 21% to $3 million in 1990.", "1990")
    check_rewrite(record, "Net profit grew 21% to $3 million in 1990.", {})
    for rewrite in [
        "Net profit grew 12% to $3 million in 1990.",
        "Net profit grew to $3 million in 1990.",
        "Net profit grew 21 to $3 million in 1990.",
        "Net profit grew 21% to 3 million in 1990.",
    ]:
        with pytest.raises(AlignmentError) as caught:
            check_rewrite(record, rewrite, {})
        assert caught.value.reason == "numbers", rewrite


def test_truncated_answer_is_a_format_rejection_and_counted():
    script = {ORIGINAL: {k: '{"rewritten": "The firm reported' for k in EDIT_KINDS}}
    _, _, stats = run([make_record("r", ORIGINAL, "Monday")], script, finish_reason="length")
    assert stats["rejection_reasons"] == {"format": 3} and stats["truncated_answers"] == 3


def test_retries_with_the_next_kind_and_records_the_kind():
    record = make_record("r", ORIGINAL, "Monday")
    first, second, _ = instance_kinds("r", 13)
    script = {ORIGINAL: {first: "not json", second: answer("The compnay reported higher sales on Monday.")}}
    backend, outcome, stats = run([record], script)
    assert [kind_of(r) for r in backend.requests] == [first, second]
    (derived,) = outcome.accepted
    assert derived.extra["edit_kind"] == second and derived.extra["attempts"] == 2
    assert derived.extra["similarity"] == 1.0 and derived.extra["generator"]["model_id"] == "scripted-rewriter"
    assert stats["rejection_reasons"] == {"format": 1}
    assert stats["accepted_by_attempt"] == {2: 1} and stats["edit_kinds"][second] == 1
    assert stats["edit_kind_shares"][second] == 1.0 and stats["llm_acceptance_rate"] == 1.0


def test_max_attempts_bounds_requests():
    record = make_record("r", ORIGINAL, "Monday")
    script = {ORIGINAL: {k: "no" for k in EDIT_KINDS}}
    backend, _, stats = run([record], script, RewriteSettings(max_attempts=5, seed=1))
    assert len(backend.requests) == 5 and stats["requests"] == 5
    assert len({r.messages for r in backend.requests}) == 5  # repeated kinds change the prompt
    backend, _, _ = run([record], script, RewriteSettings(max_attempts=1, seed=1))
    assert len(backend.requests) == 1


def test_rule_fallback_noises_non_gold_words_and_is_labelled():
    records = [make_record("r", ORIGINAL, "Monday"), TWO]
    script = {r.text: {k: "no" for k in EDIT_KINDS} for r in records}
    settings = RewriteSettings(max_attempts=3, seed=13, char_noise_fallback=True)
    _, outcome, stats = run(records, script, settings)
    assert [r.id for r in outcome.accepted] == ["r", "two"]
    for derived, original in zip(outcome.accepted, records):
        check_spans(derived.text, derived.spans, derived.id)
        assert [s.text for s in derived.spans] == original.gold_strings()
        assert derived.text != original.text and len(derived.text.split()) == len(original.text.split())
        assert derived.extra["edit_kind"] == RULE_KIND and derived.extra["fallback"] is True
        assert derived.extra["generator"] == {"backend": "rule", "model_id": RULE_KIND}
    assert stats["acceptance_rate"] == 1.0 and stats["llm_acceptance_rate"] == 0.0
    assert stats["rule_accepted"] == 2 and stats["edit_kind_shares"][RULE_KIND] == 1.0
    assert stats["fallback"] == RULE_KIND
    # seeded: the same text again
    _, again, _ = run(records, script, settings)
    assert [r.text for r in again.accepted] == [r.text for r in outcome.accepted]


def test_main_writes_valid_records_and_stats(tmp_path, monkeypatch):
    good = make_record("good", ORIGINAL, "Monday")
    twice = make_record("twice", "Sales rose in May and fell in May.", "May", "May")
    bad = make_record("bad", "He left in 1990.", "1990")
    script = {
        good.text: {k: answer("The firm reportted bigger sales on Monday.") for k in EDIT_KINDS},
        twice.text: {k: answer("In May sales rose, and in May they fel.") for k in EDIT_KINDS},
        bad.text: {k: answer("He went away that year.") for k in EDIT_KINDS},
    }
    backend = ScriptedBackend(script)
    monkeypatch.setattr(adv_p, "create_backend", lambda name, **options: backend)
    base = tmp_path / "base.jsonl"
    write_records(base, [good, twice, bad])
    out, stats_path, examples = tmp_path / "adv_p.jsonl", tmp_path / "stats.json", tmp_path / "adv_p.md"
    adv_p.main(
        [
            "--input",
            str(base),
            "--output",
            str(out),
            "--backend",
            "scripted",
            "--model-id",
            "x",
            "--seed",
            "3",
            "--max-attempts",
            "3",
            "--fallback",
            "none",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--stats",
            str(stats_path),
            "--examples",
            str(examples),
        ],
        similarity=scripted_similarity(),
    )
    derived = read_records(out)
    assert [r.id for r in derived] == ["good", "twice"]
    for record, original in zip(derived, [good, twice]):
        check_spans(record.text, record.spans, record.id)
        assert [s.text for s in record.spans] == original.gold_strings()
        assert record.extra["edit_kind"] in EDIT_KINDS and record.extra["original_text"] == original.text
    assert [s.start for s in derived[1].spans] == [3, 26]
    stats = json.loads(stats_path.read_text())
    assert stats["instances"] == 3 and stats["accepted"] == 2 and stats["acceptance_rate"] == pytest.approx(2 / 3)
    assert stats["rejection_reasons"] == {"missing_span": 3} and stats["requests"] == 5
    assert all(r.response_schema == RESPONSE_SCHEMA_TEXT for r in backend.requests)
    assert "adv_p" in examples.read_text()
    assert "cached_responses" not in stats  # how much the cache answered is logged, not a metric
    first = (out.read_bytes(), stats_path.read_bytes(), examples.read_bytes())
    # a rerun is answered by the response cache, and writes the same bytes (DVC outputs)
    adv_p.main(
        [
            "--input",
            str(base),
            "--output",
            str(out),
            "--backend",
            "scripted",
            "--model-id",
            "x",
            "--seed",
            "3",
            "--max-attempts",
            "3",
            "--fallback",
            "none",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--stats",
            str(stats_path),
            "--examples",
            str(examples),
        ],
        similarity=scripted_similarity(),
    )
    assert len(backend.requests) == 5
    assert (out.read_bytes(), stats_path.read_bytes(), examples.read_bytes()) == first


def test_summary_usage_leaves_out_the_prefix_reuse_of_llamacpp():
    """``prompt_tokens_reused`` depends on which answers were cached and on the order requests ran;
    the stats keep what the answers cost."""
    outcome = adv_p.RewriteOutcome([], [], {"r": 1}, usage=Counter(prompt_tokens=40, completion_tokens=9))
    outcome.usage.update(prompt_tokens_reused=31, cost=0.5)
    stats = adv_p.summarize(outcome, ScriptedBackend({}), RewriteSettings())
    assert stats["usage"] == {"prompt_tokens": 40, "completion_tokens": 9, "cost": 0.5}


def _synonym_or_typo(body: dict) -> str:
    """The fake provider's rewrite: a typo in "reported" when typos are asked for, else a synonym."""
    prompt = last_user_message(body)
    sentence = prompt.rsplit("Sentence: ", 1)[1]
    new = "reportde" if prompt.startswith("Add typos") else "announced"
    return json.dumps({"rewritten": sentence.replace("reported", new)})


def _paper_like(tmp_path: Path, cap: float | None) -> Path:
    """The paper profile (GPT-4.1 rewriter) under another ledger name, with the cap ``cap``."""
    sweep = yaml.safe_load((ROOT / "conf/profiles/paper.yaml").read_text())["sweep"]
    sweep.update(profile="paper-test", max_cost_usd=cap)
    path = tmp_path / f"paper-{cap}.yaml"
    path.write_text(yaml.safe_dump({"sweep": sweep}))
    return path


def _rewrite_argv(tmp_path: Path, server: OpenAIServer, profile: Path, *extra: str) -> list[str]:
    out = tmp_path / "timex" / "adv_p.jsonl"
    argv = ["--input", str(tmp_path / "base.jsonl"), "--output", str(out), "--cache-dir", str(tmp_path / "cache")]
    argv += ["--sweep", str(profile), "--option", f"base_url={server.base_url}"]
    argv += ["--stats", str(tmp_path / "stats.json"), "--examples", str(tmp_path / "adv_p.md")]
    argv += ["--ledger-file", str(tmp_path / "spend.json"), "--usage", str(tmp_path / "usage.json"), *extra]
    return argv


REPORTED = [
    make_record("a", "The company reported higher sales on Monday.", "Monday"),
    make_record("b", "Officials reported the deal on Friday after talks.", "Friday"),
]


def test_the_paper_profiles_api_generator_sends_the_rewrites_to_the_server(tmp_path, monkeypatch):
    """``sweep.adv_p_generator: gpt41`` (the paper profile): every rewrite request goes to the
    OpenAI-compatible server as ``openai/gpt-4.1`` under the answer schema, the accepted
    rewrites name that generator, and a rerun is answered by the response cache with the same bytes."""
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)  # a loopback server gets a placeholder
    records = REPORTED
    write_records(tmp_path / "base.jsonl", records)
    out, stats_path, examples = tmp_path / "timex/adv_p.jsonl", tmp_path / "stats.json", tmp_path / "adv_p.md"
    with OpenAIServer(answer=_synonym_or_typo) as server:
        argv = _rewrite_argv(tmp_path, server, _paper_like(tmp_path, 5.0))
        adv_p.main(argv, similarity=scripted_similarity())
        assert server.request_count == 2  # one attempt each: both accepted
        assert {body["model"] for body in server.bodies} == {"openai/gpt-4.1"}
        assert sorted(last_user_message(b).rsplit("Sentence: ", 1)[1] for b in server.bodies) == sorted(
            r.text for r in records
        )
        assert all(b["response_format"]["type"] == "json_schema" for b in server.bodies)
        derived = read_records(out)
        assert [r.id for r in derived] == ["a", "b"]
        for record, original in zip(derived, records):
            assert record.extra["generator"] == {"backend": "openai", "model_id": "openai/gpt-4.1"}
            assert record.text != original.text and "reported" not in record.text
            assert [s.text for s in record.spans] == original.gold_strings()
            check_spans(record.text, record.spans, record.id)
        stats = json.loads(stats_path.read_text())
        assert stats["generator"] == {"backend": "openai", "model_id": "openai/gpt-4.1"}
        assert (stats["accepted"], stats["llm_accepted"], stats["requests"]) == (2, 2, 2)
        sent = [server.completion(b)["usage"] for b in server.bodies]
        assert stats["usage"]["prompt_tokens"] == sum(u["prompt_tokens"] for u in sent)
        assert stats["usage"]["cost"] == pytest.approx(sum(u["cost"] for u in sent))
        first = (out.read_bytes(), stats_path.read_bytes(), examples.read_bytes())
        adv_p.main(argv, similarity=scripted_similarity())
        assert server.request_count == 2  # the rerun sent nothing
    assert (out.read_bytes(), stats_path.read_bytes(), examples.read_bytes()) == first


def _billed_usage_matches(usage: dict, server: OpenAIServer, requests: int) -> None:
    """The usage file holds the server's own bill over every process: all attempts, all billed."""
    assert usage["attempts"] == server.request_count
    assert usage["billed_attempts"] == server.billed["responses"]
    assert usage["prompt_tokens"] == server.billed["prompt_tokens"]
    assert usage["completion_tokens"] == server.billed["completion_tokens"]
    assert usage["cost"] == pytest.approx(server.billed_cost)
    assert (usage["sent"], usage["cached"]) == (requests, 0)


def test_the_rewriters_spend_is_the_servers_bill_with_its_retries(tmp_path, monkeypatch):
    """Regression: the rewriter's meter had no price and no reservation, and its usage summed
    cached answers and dropped billed retries. Now the sweep's ledger and the usage file hold what
    the server billed (its own token rule: words; its own price), billed retries included, and a
    rerun from the cache adds nothing to the spend."""
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    records = [*REPORTED, make_record("c", "Prices reported in May stayed flat.", "May")]
    write_records(tmp_path / "base.jsonl", records)
    # OpenAI's replies carry no cost: priced from the model file, at the server's reported tokens
    server = OpenAIServer(
        answer=_synonym_or_typo,
        report_cost=False,
        fault_rate=0.6,
        kinds=("null_content", "empty_stop", "500"),
        seed=3,
        price_in_per_token=2.0e-6,  # what the provider bills: conf/model/gpt41.yaml's list price
        price_out_per_token=8.0e-6,
    )
    options = ("--option", "backoff_base_s=0.01", "--option", "backoff_max_s=0.02", "--option", "max_retries=12")
    with server:
        argv = _rewrite_argv(tmp_path, server, _paper_like(tmp_path, 5.0), *options)
        adv_p.main(argv, similarity=scripted_similarity())
        usage = json.loads((tmp_path / "usage.json").read_text())["usage"]
        assert server.billed["responses"] > len(records), "some billed replies were faults, retried"
        _billed_usage_matches(usage, server, len(records))
        entries = read_ledger(tmp_path / "spend.json")["ledgers"]["paper-test"]
        assert len(entries) == 1 and entries[0]["cost_usd"] == pytest.approx(server.billed_cost)
        assert entries[0]["run"] == "adv_p timex (gpt41)"
        assert not read_ledger(tmp_path / "spend.json")["reservations"]["paper-test"]

        sent = server.request_count
        adv_p.main(argv, similarity=scripted_similarity())  # from the cache: nothing new spent
        assert server.request_count == sent
        usage = json.loads((tmp_path / "usage.json").read_text())["usage"]
        assert (usage["sent"], usage["cached"], usage["attempts"], usage["cost"]) == (0, len(records), 0, 0.0)
        entries = read_ledger(tmp_path / "spend.json")["ledgers"]["paper-test"]
        assert [e["cost_usd"] for e in entries][1] == 0.0
        assert sum(e["cost_usd"] for e in entries) == pytest.approx(server.billed_cost)


def test_a_rerun_after_failed_rewrites_reports_the_whole_rewritings_bill(tmp_path, monkeypatch):
    """Regression: a rerun's usage file counted only its own process, so the rewrites an earlier
    process bought (and its billed retries of the request that failed) became free cached answers
    in the report. Now it holds what the server billed across both processes; a third run, after
    the rewriting completed, reports everything as cached at no cost."""
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    records = [*REPORTED, make_record("c", "Prices reported in May stayed flat.", "May")]
    write_records(tmp_path / "base.jsonl", records)
    server = OpenAIServer(
        answer=_synonym_or_typo, report_cost=False, price_in_per_token=2.0e-6, price_out_per_token=8.0e-6
    )
    options = ("--option", "backoff_base_s=0.01", "--option", "backoff_max_s=0.02", "--option", "max_retries=2")
    with server:
        argv = _rewrite_argv(tmp_path, server, _paper_like(tmp_path, 5.0), *options, "--max-attempts", "1")
        server.doom("Prices reported in May", "null_content")  # billed, never an answer
        with pytest.raises(SystemExit) as stop:
            adv_p.main(argv, similarity=scripted_similarity())
        assert stop.value.code == 1 and server.billed["responses"] == 2 + 3  # a, b; c's 3 billed tries
        first = json.loads((tmp_path / "usage.json").read_text())["usage"]
        assert first["cost"] == pytest.approx(server.billed_cost)

        server.heal()
        adv_p.main(argv, similarity=scripted_similarity())
        assert [r.id for r in read_records(tmp_path / "timex" / "adv_p.jsonl")] == ["a", "b", "c"]
        _billed_usage_matches(json.loads((tmp_path / "usage.json").read_text())["usage"], server, len(records))
        entries = read_ledger(tmp_path / "spend.json")["ledgers"]["paper-test"]
        assert sum(e["cost_usd"] for e in entries) == pytest.approx(server.billed_cost)  # each process once

        adv_p.main(argv, similarity=scripted_similarity())  # complete: its journals were dropped
        usage = json.loads((tmp_path / "usage.json").read_text())["usage"]
        assert (usage["sent"], usage["cached"], usage["attempts"], usage["cost"]) == (0, len(records), 0, 0.0)


def test_a_rerun_after_ctrl_c_counts_the_rewrites_the_stopped_process_bought(tmp_path, monkeypatch):
    """Ctrl-C after the first round came back (every answer bought and cached): the stopped
    process settles and exits 130; the rerun sends nothing and its usage file is still the
    server's whole bill, not three free cached answers."""
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    records = [*REPORTED, make_record("c", "Prices reported in May stayed flat.", "May")]
    write_records(tmp_path / "base.jsonl", records)

    def ctrl_c(originals, rewrites):
        raise KeyboardInterrupt

    with OpenAIServer(
        answer=_synonym_or_typo, report_cost=False, price_in_per_token=2.0e-6, price_out_per_token=8.0e-6
    ) as server:
        argv = _rewrite_argv(tmp_path, server, _paper_like(tmp_path, 5.0))
        with pytest.raises(SystemExit) as stop:
            adv_p.main(argv, similarity=ctrl_c)
        assert stop.value.code == 130 and server.request_count == len(records)
        adv_p.main(argv, similarity=scripted_similarity())
        assert server.request_count == len(records)  # all from the cache
        _billed_usage_matches(json.loads((tmp_path / "usage.json").read_text())["usage"], server, len(records))


def test_a_cap_or_its_absence_stops_the_rewriter_before_a_request(tmp_path, monkeypatch, capsys):
    """The sweep's cap covers the rewriting: a ceiling past it, or a paid profile without a cap,
    is one ``error: budget:`` line, exit 2, nothing sent or written."""
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    write_records(tmp_path / "base.jsonl", REPORTED)
    with OpenAIServer(answer=_synonym_or_typo) as server:
        for cap, expected in ((1e-7, "would cost"), (None, "sets no cap")):
            with pytest.raises(SystemExit) as stopped:
                adv_p.main(
                    _rewrite_argv(tmp_path, server, _paper_like(tmp_path, cap)), similarity=scripted_similarity()
                )
            assert stopped.value.code == 2
            errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
            assert len(errors) == 1 and errors[0].startswith("error: budget: ") and expected in errors[0]
            assert "max_cost_usd" in errors[0]
        assert server.request_count == 0
    assert not (tmp_path / "timex" / "adv_p.jsonl").exists() and not (tmp_path / "usage.json").exists()


def test_cli_options():
    base = ["--input", "b", "--output", "o", "--seed", "1", "--cache-dir", "c"]
    raw = adv_p.build_parser().parse_args(base)
    assert (raw.fallback, raw.min_similarity, raw.max_attempts) == (None, None, None)  # None: take params.yaml
    assert raw.edit_kinds == EDIT_KINDS
    args = adv_p.parse_args(
        base
        + [
            "--fallback",
            "none",
            "--edit-kinds",
            "lexical,structural",
            "--min-similarity",
            "0.9",
            "--max-length-ratio",
            "1.2",
        ]
    )
    assert args.fallback == "none" and args.edit_kinds == ("lexical", "structural")
    assert (args.min_similarity, args.max_length_ratio, args.seed) == (0.9, 1.2, 1)
    with pytest.raises(SystemExit):
        adv_p.build_parser().parse_args(base + ["--edit-kinds", "paraphrase"])


@pytest.mark.slow
def test_embedded_model_three_instances(tmp_path):
    """The real SmolLM2 135M and MiniLM on 3 timex instances: whatever is accepted is valid."""
    from src.data.schema import Record, Span, write_records

    texts = [
        ("s1", "The company reported strong earnings last week , its chairman said .", "last week"),
        ("s2", "Officials said on Friday that the talks had collapsed after two days .", "Friday"),
        ("s3", "Sales rose sharply in 1998 after the merger was announced in March .", "1998"),
    ]
    records = []
    for rid, text, timex in texts:
        start = text.index(timex)
        records.append(Record(rid, rid, text, [Span(start, start + len(timex), timex, "TIMEX")], "synthetic"))
    source = tmp_path / "base.jsonl"
    write_records(source, records)
    out, stats_path = tmp_path / "adv_p.jsonl", tmp_path / "stats.json"
    adv_p.main(
        [
            "--input",
            str(source),
            "--output",
            str(out),
            "--model-config",
            "conf/model/smollm2_135m.yaml",
            "--seed",
            "13",
            "--max-attempts",
            "3",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--limit",
            "3",
            "--stats",
            str(stats_path),
            "--fallback",
            "char_noise_rule",
        ]
    )
    stats = json.loads(stats_path.read_text())
    base = {r.id: r for r in records}
    derived = read_records(out)
    assert stats["instances"] == 3 and stats["accepted"] == len(derived)
    llm_rejections = sum(sum(stats["rejection_reasons_by_kind"].get(k, {}).values()) for k in EDIT_KINDS)
    assert llm_rejections + stats["llm_accepted"] == stats["requests"]
    for record in derived:
        check_spans(record.text, record.spans, record.id)
        assert [s.text for s in record.spans] == base[record.id].gold_strings()
        assert record.extra["similarity"] >= stats["thresholds"]["min_similarity"]
        assert record.extra["edit_kind"] in EDIT_KINDS + (RULE_KIND,)
