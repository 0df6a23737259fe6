"""A provider that does not behave: odd figures in ``usage``, no usage at all, a bill above the
price, a provider or weight format that changes mid-run.

The loopback server bills every answer by its own rule (its tokens are words x 1.3 rounded up,
or UTF-8 bytes: not the run's characters / 4) whatever its bodies show, so every scenario ends
with the same check: the ledger holds the server's bill (or, where a reply said nothing, a bound
at or above it), a finite number, never above the cap; every request answered, no traceback,
every odd reply named in the log and counted in the usage.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest

from src.backends.cache import CachedBackend, ResponseCache
from src.backends.openai_backend import OpenAIBackend
from src.backends.served import OFF_PIN, off_pin_reason
from src.billing.ledger import Budget, read_ledger, reserve
from src.billing.meter import Meter
from src.billing.prices import Price, TokenCounter
from src.core.requests import ChatRequest
from tests.helpers.openai_server import OpenAIServer, last_user_message, quoted_words_answer

PRICE_IN, PRICE_OUT = 0.5e-6, 2e-6  # USD per token, the server's and the model file's
PRICE = Price(PRICE_IN * 1e6, PRICE_OUT * 1e6)
N = 12
PIN = {"only": ["deepinfra"], "quantizations": ["fp8"], "allow_fallbacks": False}


def words_x13(text: str) -> int:
    """The server's tokenizer: whitespace words x 1.3, rounded up (short words: more tokens than characters / 4)."""
    return math.ceil(len(text.split()) * 1.3)


def utf8_bytes(text: str) -> int:
    return len(text.encode("utf-8"))


def requests(n: int = N, max_tokens: int = 64) -> list[ChatRequest]:
    # short words, so a characters / 4 estimate falls below either server rule
    return [
        ChatRequest(messages=(("user", f'a b c d e f g "w{i}" h i j k'),), max_tokens=max_tokens, request_id=f"r{i}")
        for i in range(n)
    ]


def server(**kwargs) -> OpenAIServer:
    kwargs.setdefault("count_tokens", words_x13)
    return OpenAIServer(
        answer=quoted_words_answer, price_in_per_token=PRICE_IN, price_out_per_token=PRICE_OUT, **kwargs
    )


def metered(base_url: str, tmp_path, cap: float = 1.0, **options) -> tuple[OpenAIBackend, Budget]:
    """A backend whose meter prices at the model file's price and holds a reservation in a real ledger."""
    budget = Budget(max_cost_usd=cap, ledger="adversarial", ledger_file=tmp_path / "spend.json", stale_after_s=600)
    backend = OpenAIBackend(model_id="m", base_url=base_url, max_retries=2, backoff_base_s=0, **options)
    probe = Meter(PRICE, TokenCounter())
    ceiling = sum(probe.ceiling(request) for request in requests())
    backend.meter = Meter(PRICE, TokenCounter(), reserve(budget, "adversarial-run", min(ceiling, cap), N))
    return backend, budget


def settled(backend: OpenAIBackend, budget: Budget) -> list[dict]:
    """Settle the run's reservation; the ledger's entries of this ledger."""
    backend.meter.reservation.settle(backend.meter.spend())
    return read_ledger(budget.ledger_file)["ledgers"]["adversarial"]


def shown_cost(value):
    """A ``show_usage`` rule: the billed usage with ``cost`` replaced by ``value``."""
    return lambda body, usage: {**usage, "cost": value}


@pytest.mark.parametrize(
    "odd, named",
    [
        (float("nan"), "usage.cost nan"),
        (float("inf"), "usage.cost inf"),
        (-0.001, "usage.cost -0.001"),
        ("n/a", "usage.cost 'n/a'"),
        (True, "usage.cost True"),
        ([0.001], "usage.cost [0.001]"),
    ],
)
def test_an_odd_cost_is_priced_from_the_table_named_counted_and_never_reaches_the_ledger(tmp_path, caplog, odd, named):
    caplog.set_level(logging.WARNING)
    with server(show_usage=shown_cost(odd)) as provider:
        backend, budget = metered(provider.base_url, tmp_path)
        results = backend.generate(requests())
        billed_cost, billed_responses = provider.billed_cost, provider.billed["responses"]
    assert [r.text for r in results] == [f'["w{i}"]' for i in range(N)]  # answered, nothing failed
    entries = settled(backend, budget)
    # the reported tokens are the server's, so the price table gives the server's bill to the cent
    assert len(entries) == 1 and math.isfinite(entries[0]["cost_usd"])
    assert entries[0]["cost_usd"] == pytest.approx(billed_cost, rel=1e-9)
    total = backend.meter.total
    assert total.cost_reported == 0.0 and total.cost_price_table == pytest.approx(billed_cost, rel=1e-9)
    assert (total.attempts, total.billed_attempts, total.odd_replies) == (N, N, N) == (N, billed_responses, N)
    assert entries[0]["odd_replies"] == N
    odd_lines = [m for m in caplog.messages if "odd figures in the reply's usage" in m]
    assert len(odd_lines) == N and all(named in line for line in odd_lines), odd_lines[:2]
    assert all(r.usage.get("cost") is None for r in results)  # no odd figure kept with an answer


def test_a_cost_below_the_replys_own_tokens_at_the_price_is_disputed_and_the_cap_holds_on_the_table(tmp_path, caplog):
    """``usage.cost: 0`` beside the tokens the reply reports, under a cap of half their list price:
    each such reply is named and the cap counts its tokens at the table, so the run stops within
    the cap instead of sending everything with a ledger of $0."""
    caplog.set_level(logging.WARNING)
    long = [  # about 2,600 prompt tokens each: the prompt, not the answer's bound, is the bill
        ChatRequest(messages=(("user", "a " * 2000 + f'"w{i}"'),), max_tokens=16, request_id=f"r{i}") for i in range(N)
    ]
    with server(show_usage=shown_cost(0)) as provider:  # every request once, uncapped: the list price
        OpenAIBackend(model_id="m", base_url=provider.base_url, max_retries=0).generate(long)
        list_cost = PRICE.cost(provider.billed["prompt_tokens"], provider.billed["completion_tokens"])
    cap = list_cost / 2
    with server(show_usage=shown_cost(0)) as provider:
        backend, budget = metered(provider.base_url, tmp_path, cap=cap)
        results = backend.generate(long)
        answered = provider.billed["responses"]
        at_list = PRICE.cost(provider.billed["prompt_tokens"], provider.billed["completion_tokens"])
    assert 0 < sum(r.ok for r in results) == answered < N
    assert all("budget: stopped sending" in r.error for r in results if not r.ok)
    total = backend.meter.total
    assert total.disputed_replies == answered and total.cost_reported == 0.0  # the provider's word, kept
    assert total.cost_disputed == pytest.approx(at_list, rel=1e-9)
    entries = settled(backend, budget)
    assert entries[0]["cost_usd"] == pytest.approx(at_list, rel=1e-9) and at_list <= cap
    assert entries[0]["disputed_replies"] == answered
    lines = [m for m in caplog.messages if "below their" in m and "the cap counts the larger" in m]
    assert len(lines) == answered and "reported $0 for" in lines[0]


def test_a_cost_at_or_above_the_table_is_the_bill_and_no_dispute(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    with server(show_usage=lambda body, usage: {**usage, "cost": usage["cost"] * 1.5}) as provider:
        backend, budget = metered(provider.base_url, tmp_path)
        backend.generate(requests())
        billed_cost = provider.billed_cost
    total = backend.meter.total
    assert total.disputed_replies == 0 and total.cost_reported == pytest.approx(1.5 * billed_cost, rel=1e-9)
    assert not [m for m in caplog.messages if "the cap counts the larger" in m]
    settled(backend, budget)


def test_numeric_strings_are_converted_and_such_an_answer_is_cached(tmp_path):
    def strings(body: dict, usage: dict) -> dict:
        return {name: str(value) for name, value in usage.items()}

    with server(show_usage=strings) as provider:
        backend, budget = metered(provider.base_url, tmp_path)
        cached = CachedBackend(backend, ResponseCache(tmp_path / "cache"))
        first = cached.generate(requests())
        sent = provider.request_count
        again = cached.generate(requests())
        billed_cost = provider.billed_cost
        assert provider.request_count == sent == N  # string token counts no longer make an answer uncacheable
    assert all(r.cached for r in again) and [r.text for r in again] == [r.text for r in first]
    total = backend.meter.total
    assert total.odd_replies == 0 and total.cost_reported == pytest.approx(billed_cost, rel=1e-9)
    assert total.estimated_prompt_tokens == total.estimated_completion_tokens == 0
    assert settled(backend, budget)[0]["cost_usd"] == pytest.approx(billed_cost, rel=1e-9)


def test_a_byok_reply_counts_the_upstream_cost_and_a_plain_one_is_not_counted_twice(tmp_path):
    """OpenRouter with the user's own provider key reports ``cost`` 0 (or its fee, ``is_byok``) and
    the provider's charge in ``cost_details.upstream_inference_cost``; on other replies the upstream
    figure repeats the cost."""

    def byok(body: dict, usage: dict) -> dict:
        n = int(last_user_message(body).split('"w')[1].split('"')[0])
        upstream = {"upstream_inference_cost": usage["cost"]}
        if n % 3 == 0:  # BYOK without the flag: nothing charged by OpenRouter
            return {**usage, "cost": 0, "cost_details": upstream}
        if n % 3 == 1:  # BYOK with a fee of 5% on top of the upstream charge
            return {**usage, "cost": usage["cost"] * 0.05, "is_byok": True, "cost_details": upstream}
        return {**usage, "is_byok": False, "cost_details": upstream}  # OpenRouter's own credits

    with server(show_usage=byok) as provider:
        backend, budget = metered(provider.base_url, tmp_path)
        backend.generate(requests())
        by_prompt = {last_user_message(body): body for body in provider.bodies}
        fees = sum(
            0.05 * provider.usage_of(body, quoted_words_answer(body))["cost"]
            for prompt, body in by_prompt.items()
            if int(prompt.split('"w')[1].split('"')[0]) % 3 == 1
        )
        billed_cost = provider.billed_cost
    assert backend.meter.total.cost_reported == pytest.approx(billed_cost + fees, rel=1e-9)
    assert settled(backend, budget)[0]["cost_usd"] == pytest.approx(billed_cost + fees, rel=1e-9)


@pytest.mark.parametrize("rule", [words_x13, utf8_bytes], ids=["words-x1.3", "bytes"])
def test_a_reply_without_usage_is_settled_at_a_bound_at_or_above_the_servers_bill(tmp_path, rule):
    with server(count_tokens=rule, show_usage=lambda body, usage: None) as provider:
        backend, budget = metered(provider.base_url, tmp_path)
        results = backend.generate(requests())
        billed = dict(provider.billed)
        billed_cost = provider.billed_cost
    assert all(r.ok for r in results)
    total = backend.meter.total
    assert total.estimated_prompt_tokens == total.prompt_tokens >= billed["prompt_tokens"]
    assert total.estimated_completion_tokens == total.completion_tokens >= billed["completion_tokens"]
    assert total.cost_estimated >= billed_cost > 0
    entries = settled(backend, budget)
    assert billed_cost <= entries[0]["cost_usd"] <= budget.max_cost_usd


def test_a_cap_holds_against_a_provider_whose_replies_say_nothing(tmp_path):
    """A cap of 5 attempts' ceilings: the run stops sending within it, and what the server billed
    is within what the ledger holds (estimates at the admitted bound)."""
    probe = Meter(PRICE, TokenCounter())
    cap = 5.5 * probe.ceiling(requests()[0])
    with server(count_tokens=utf8_bytes, show_usage=lambda body, usage: None) as provider:
        backend, budget = metered(provider.base_url, tmp_path, cap=cap)
        results = backend.generate(requests())
        billed_cost = provider.billed_cost
    answered = sum(r.ok for r in results)
    assert 0 < answered < N and all("budget: stopped sending" in r.error for r in results if not r.ok)
    entries = settled(backend, budget)
    assert billed_cost <= entries[0]["cost_usd"] <= cap


def test_a_reported_cost_above_the_admitted_ceiling_is_logged(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    with OpenAIServer(answer=quoted_words_answer, price_in_per_token=1e-3, price_out_per_token=1e-3) as provider:
        backend, budget = metered(provider.base_url, tmp_path, cap=10.0)
        backend.generate(requests(2))
    lines = [m for m in caplog.messages if "above its admitted ceiling" in m]
    assert len(lines) == 2 and "model file's price below the provider's" in lines[0]
    settled(backend, budget)


def _provider_of(body: dict) -> dict:
    """DeepInfra at fp8 for the first half of the prompts, then Together (a switch mid-run)."""
    n = int(last_user_message(body).split('"w')[1].split('"')[0])
    return {"provider": "DeepInfra", "quantization": "fp8"} if n < N // 2 else {"provider": "Together"}


def test_an_off_pin_answer_is_kept_under_warn_but_never_cached_under_the_pinned_key(tmp_path):
    with server(fields_of=_provider_of) as provider:
        backend = OpenAIBackend(model_id="m", base_url=provider.base_url, routing=PIN, max_retries=1)
        cached = CachedBackend(backend, ResponseCache(tmp_path / "cache"))
        first = cached.generate(requests())
        assert provider.request_count == N
        rerun = cached.generate(requests())
        resent = sorted(last_user_message(body) for body in provider.bodies[N:])
    assert [r.text for r in first] == [f'["w{i}"]' for i in range(N)]  # kept and counted
    off = [r for r in first if r.served.get(OFF_PIN)]
    assert len(off) == N // 2 and all("provider 'Together' outside ['deepinfra']" in r.served[OFF_PIN] for r in off)
    assert sum(r.cached for r in rerun) == N // 2  # only the pinned provider's answers were cached
    assert resent == sorted(f'a b c d e f g "w{i}" h i j k' for i in range(N // 2, N))
    assert len(ResponseCache(tmp_path / "cache")) == N // 2


def test_under_fail_every_reply_form_from_off_the_pin_fails_refusals_too(tmp_path):
    def fields(body: dict) -> dict:
        n = int(last_user_message(body).split('"w')[1].split('"')[0])
        if n == 0:
            return {"provider": "DeepInfra", "quantization": "fp4"}  # the pinned provider, another weight format
        return {"provider": "Together"}

    with server(fields_of=fields, fault_rate=1.0, kinds=("refusal",)) as provider:
        backend = OpenAIBackend(
            model_id="m", base_url=provider.base_url, routing=PIN, on_model_mismatch="fail", max_retries=1
        )
        results = backend.generate(requests(3))
        sent = provider.request_count
    assert all(r.text is None for r in results) and sent == 6  # each retried once, none kept
    assert "quantization 'fp4' outside ['fp8']" in results[0].error
    assert "provider 'Together' outside ['deepinfra']" in results[1].error


def test_on_a_pinned_run_a_reply_that_names_no_provider_is_named_never_passed(tmp_path):
    """Issue 48: a reply naming no provider passed the pin's check: a self-hosted server and
    OpenRouter serving one model id were indistinguishable. Under ``warn`` it is kept, named and
    never cached under the pinned key; under ``fail`` it fails."""

    def silent(body: dict) -> dict:
        n = int(last_user_message(body).split('"w')[1].split('"')[0])
        return {"provider": "DeepInfra"} if n % 2 == 0 else {"provider": None}  # a self-hosted server names none

    with server(fields_of=silent) as provider:
        backend = OpenAIBackend(model_id="m", base_url=provider.base_url, routing=PIN, max_retries=1)
        kept = CachedBackend(backend, ResponseCache(tmp_path / "cache")).generate(requests(4))
        failing = OpenAIBackend(
            model_id="m", base_url=provider.base_url, routing=PIN, on_model_mismatch="fail", max_retries=0
        ).generate(requests(4))
    assert all(r.ok for r in kept)
    assert [r.served.get(OFF_PIN) for r in kept[0::2]] == [None, None]
    assert all("the reply names no provider (pinned to ['deepinfra'])" in r.served[OFF_PIN] for r in kept[1::2])
    assert len(ResponseCache(tmp_path / "cache")) == 2  # only the answers that named the pinned provider
    assert [r.ok for r in failing] == [True, False, True, False] and "names no provider" in failing[1].error


def test_on_a_pinned_run_a_reply_that_names_no_model_is_off_the_pin():
    assert off_pin_reason("m", PIN, {"provider": "DeepInfra"}) == (
        "the reply names no model (a pinned run of 'm' checks who served it)"
    )
    assert off_pin_reason("m", PIN, {"provider": "DeepInfra", "model": "m"}) is None
    assert off_pin_reason("m", None, {}) is None  # an unpinned run: nothing to compare is no mismatch


def test_permanent_http_errors_stop_the_call_early(tmp_path):
    """A pin no provider matches: OpenRouter answers 404 to every request; the call stops after
    ``stop_after_same_fault`` of them instead of sending every one."""
    with server() as provider:
        provider.inject(None, status=404, times=None, body='{"error": {"message": "No endpoints found"}}')
        backend = OpenAIBackend(
            model_id="m", base_url=provider.base_url, stop_after_same_fault=4, max_concurrency=1, max_retries=2
        )
        results = backend.generate(requests(20))
        sent = provider.request_count
    assert sent == 4 and all(r.text is None for r in results)
    assert backend.stop_reason and "stopped early" in backend.stop_reason and "HTTP 404" in backend.stop_reason
    assert sum("stopped early" in (r.error or "") for r in results) == 16


@pytest.mark.slow  # one src.run subprocess (about 15 s): the ledger, usage.json and the log of a real run
@pytest.mark.timeout(300)
def test_a_run_against_a_provider_answering_cost_nan_settles_its_bill_and_names_every_odd_reply(tmp_path):
    """``python -m src.run model=qwen25_7b strategy=D`` with a cap and a ledger, every reply's
    ``usage.cost`` NaN: exit 0, the ledger holds the server's bill (a finite number, within the
    cap), the end-of-run line and ``usage.json`` count the odd replies, no traceback."""
    import json
    import os
    import subprocess
    import sys

    import mlflow

    from src.data.schema import Record, Span, write_records
    from src.tracking.history import read_history
    from tests.helpers.paths import REPO_ROOT

    records = []
    for n in range(8):
        text = f"It rained on Friday {n} ."
        records.append(Record(f"d{n}#s0", f"d{n}", text, [Span(13, 19, "Friday", "TIMEX")], "test"))
    for split in ("base", "train"):
        write_records(tmp_path / "prepared" / "timex" / f"{split}.jsonl", records)
    ledger = tmp_path / "spend.json"
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with OpenAIServer(
        answer=lambda body: '["Friday"]',
        count_tokens=words_x13,
        price_in_per_token=0.04e-6,  # conf/model/qwen25_7b.yaml's price
        price_out_per_token=0.1e-6,
        show_usage=shown_cost(float("nan")),
    ) as provider:
        done = subprocess.run(
            [sys.executable, "-m", "src.run", "model=qwen25_7b", "strategy=D", "tasks=[timex]", "datasets=[base]",
             "limit=8", f"model.options.base_url={provider.base_url}", "model.options.backoff_base_s=0.01",
             f"paths.prepared={tmp_path / 'prepared'}", f"paths.cache={tmp_path / 'cache'}",
             f"mlflow.tracking_uri={store}", f"summary={tmp_path / 'summary.json'}",
             f"hydra.run.dir={tmp_path / 'outputs'}", "scoring.bootstrap_resamples=20",
             "budget.max_cost_usd=1", "budget.ledger=adversarial", f"budget.ledger_file={ledger}"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=280,
            env={k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "OPENROUTER_API_KEY")},
        )  # fmt: skip
        billed_cost, answered = provider.billed_cost, provider.billed["responses"]
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "Traceback" not in output, output[-3000:]
    entries = json.loads(ledger.read_text())["ledgers"]["adversarial"]
    assert len(entries) == 1 and math.isfinite(entries[0]["cost_usd"]) and "NaN" not in ledger.read_text()
    assert entries[0]["cost_usd"] == pytest.approx(billed_cost, rel=1e-9) and 0 < billed_cost <= 1
    assert f"{answered} odd replies" in output and output.count("usage.cost nan") == answered == 8
    run_id = read_history(tmp_path / "summary.json")["run_id"]
    folder = mlflow.MlflowClient(tracking_uri=store).download_artifacts(run_id, "usage.json", str(tmp_path / "a"))
    assert json.loads(Path(folder).read_text())["total"]["odd_replies"] == 8
