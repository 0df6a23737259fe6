"""The one loopback OpenAI-compatible server of the tests and benchmarks (127.0.0.1 only).

It answers ``POST /v1/chat/completions`` (and ``/v1/completions``) with text chosen by an
``answer`` rule, and injects faults two ways:

* **by marker** (:meth:`OpenAIServer.inject`): a status, a delay or a raw body served to the
  next ``times`` requests whose last user message contains the marker;
* **by draw** (``fault_rate``, ``kinds``) and **forever** (:meth:`OpenAIServer.doom`): one of
  ``FAULT_KINDS`` per request. Whether the n-th request for a prompt gets a fault, and which,
  comes from ``random.Random(f"{seed}|{prompt}|{n}")``: the same in every run, independent of
  thread scheduling, and it keeps counting across runs against one server (a rerun sees fresh
  draws).

It can also behave like a small self-hosted server: ``slots=1`` serves one request at a time
and either queues the others (``when_busy="queue"``, llama.cpp's Python server) or refuses
them with 429 (``when_busy="429"``); ``refuse_formats=("json_schema",)`` answers a
``response_format`` of that type with llama.cpp's ``HTTP 500 ... Input should be 'text' or
'json_object'`` (``refused_formats`` counts them).

It records every request body, ``Authorization`` header, status and arrival time, the highest
number in flight, and per prompt the requests received (``requests``), complete correct
answers sent (``answers``) and faults served (``served_faults`` by kind), so a test can prove
that no answered prompt was asked for again.

**Billing** (what a provider would charge, whatever the body shows): every 200 whose body is a
completion the server generated, written whole, is billed at the usage the server computed
for it, also when the body leaves ``usage`` (or its ``cost``) out: the Counter ``billed`` counts
``responses``, ``prompt_tokens`` and ``completion_tokens``, the float ``billed_cost`` the cost
(``price_in_per_token * prompt + price_out_per_token * completion``, each reply's rounded to 12
decimals), ``billed_by_prompt`` the billed replies per prompt. Not billed: error statuses,
``hang``, ``reset``, a body cut or undecodable (``truncated``, ``truncated_json``, ``bad_gzip``,
``slow_drip_over``), an HTML page or an ``error`` object (no completion reached the client), a
body the client stopped reading. Tokens are counted with ``count_tokens`` (default:
whitespace-separated words) over the messages' contents (or the ``prompt``) and the generated text.

Usage::

    with OpenAIServer(answer=quoted_words_answer, fault_rate=0.3, kinds=("empty_stop",)) as server:
        backend = OpenAIBackend(model_id="m", base_url=server.base_url, timeout_s=1)

``python -m tests.helpers.openai_server --latency 0.2`` serves in its own process (benchmarks).
"""

from __future__ import annotations

import email.utils
import json
import random
import re
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

AnswerRule = Callable[[dict], str]

FAULT_KINDS = (
    "429_retry_after",  # 429 with a short Retry-After in seconds
    "429",  # 429 without one
    "500",
    "hang",  # no response for longer than the client's timeout, then the connection closes
    "reset",  # the connection is reset (RST) before any response
    "truncated",  # a 200 whose body stops halfway (Content-Length promises more)
    "truncated_json",  # a complete 200 whose JSON text is cut
    "null_content",
    "missing_message",
    "empty_choices",
    "html",  # a 200 with an HTML page (a proxy's error page)
    "error_object",  # a 200 carrying an ``error`` object and no choices
    "empty_stop",  # content "" with finish_reason stop
    "empty_error",  # content "" with finish_reason error
    "parts",  # the right answer, as a list of text parts (not a fault: it must be joined)
    "mismatch_same",  # the right answer, but ``model`` names another model
    "mismatch_other",  # another model's (wrong) answer, and ``model`` says so
    "length",  # the answer cut halfway with finish_reason length, well under max_tokens
    "bad_gzip",  # Content-Encoding gzip on a body that does not inflate
    "slow_drip",  # the right answer dripped slowly, finishing within the client's timeout
    "slow_drip_over",  # the body dripped for longer than the client's timeout
    "retry_after_date",  # 429 with Retry-After as an HTTP date without a zone
    # reply forms (issue 36): each billed, each with one meaning for the client
    "no_usage",  # the right answer, no usage object
    "no_cost",  # the right answer, usage without cost
    "refusal",  # content null, message.refusal set: the model's answer
    "two_choices",  # a wrong first choice and the right second one
    "tool_calls",  # content null, the answer as one tool call's arguments
    "stream_body",  # the right answer as Server-Sent Events (no stream was asked for)
    "reasoning_only",  # content null, only message.reasoning, finish_reason length
)
#: Replies the server bills: a completion it generated reached the client whole (billing rule below).
BILLED_KINDS = frozenset(
    {
        "null_content",
        "missing_message",
        "empty_choices",
        "empty_stop",
        "empty_error",
        "parts",
        "mismatch_same",
        "mismatch_other",
        "length",
        "slow_drip",
        "no_usage",
        "no_cost",
        "refusal",
        "two_choices",
        "tool_calls",
        "stream_body",
        "reasoning_only",
    }
)
REFUSAL_TEXT = "I'm sorry, I can't help with that."
REASONING_TEXT = "Let me think about the time expressions in this sentence first."
# The faults the backend must heal within one run given enough retries (or one rerun).
LEGACY_KINDS = FAULT_KINDS[:12]
RETRY_AFTER_S = "0.05"
OTHER_MODEL = "fallback/other-model-7b"


def last_user_message(body: dict) -> str:
    """The last user message of a chat body, or a completion body's prompt."""
    if "prompt" in body and "messages" not in body:
        return str(body["prompt"])
    users = [m.get("content", "") for m in body.get("messages", []) if m.get("role") == "user"]
    return str(users[-1]) if users else ""


def echo_last_user_message(body: dict) -> str:
    """Default rule: a JSON array holding the last user message."""
    return json.dumps([last_user_message(body)])


def quoted_words(prompt: str) -> list[str]:
    """The double-quoted words of ``prompt``, in order."""
    return re.findall(r'"([^"]+)"', prompt)


def quoted_words_answer(body: dict) -> str:
    """Rule: a JSON array of the double-quoted words of the last user message
    (``'Find "Friday" and "said"'`` -> ``["Friday", "said"]``), so runs compare exactly."""
    return json.dumps(quoted_words(last_user_message(body)))


def routed_provider(body: dict) -> dict:
    """OpenRouter names the provider that served every reply: under a pinned ``provider.only`` (or
    ``order`` without fallbacks) the first one named (``fields_of`` may say otherwise)."""
    routing = body.get("provider")
    if not isinstance(routing, dict):
        return {}
    names = routing.get("only") or (routing.get("order") if routing.get("allow_fallbacks") is False else None)
    return {"provider": names[0]} if names else {}


@dataclass
class Fault:
    """A failure served to matching requests, ``times`` times (None = always)."""

    marker: str | None
    status: int | None = None
    times: int | None = 1
    retry_after: float | str | None = None
    delay_s: float = 0.0
    body: str = '{"error": {"message": "injected fault"}}'
    content_type: str = "application/json"

    def matches(self, body: dict) -> bool:
        return self.marker is None or self.marker in last_user_message(body)


class OpenAIServer:
    """Threaded HTTP server bound to 127.0.0.1 on a free port.

    Args:
        answer: rule mapping the request body to the answer text.
        latency_s: fixed delay before every response (simulates generation time).
        report_cost: include ``usage.cost`` (as OpenRouter does) in every answer.
        fault_rate: share of requests that get a drawn fault.
        kinds: which faults to draw from (uniformly).
        seed: seeds the draws.
        hang_s: how long ``hang`` keeps the connection silent (beyond the client timeout).
        drip_s: how long ``slow_drip`` takes to send a body (``slow_drip_over``: ``hang_s``).
        reject_auth: answer every request with 401, echoing the key's last characters as
            real providers do.
        served_model: the ``model`` every answer names (None: the requested one).
        extra_fields: top-level fields added to every answer (``system_fingerprint``, ``provider``).
        slots: requests served at once (None: no bound); ``most_served`` is the highest seen.
        when_busy: with every slot taken, ``queue`` (wait for one) or ``429`` (refuse at once).
        refuse_formats: ``response_format`` types refused with HTTP 500, as llama.cpp's server
            refuses ``json_schema``.
        count_tokens: the server's tokenizer (text -> tokens) for the usage it reports and bills
            (None: whitespace-separated words).
        price_in_per_token, price_out_per_token: the prices of ``usage.cost`` and ``billed_cost``.
        tier_of: the ``service_tier`` an answer to a body reports (None: no field), as OpenAI
            reports the tier that served a flex request; a ``flex`` answer is billed at half price.
        show_usage: what the body shows as ``usage``, given the request body and the usage the
            server bills (an adversarial provider: a NaN, negative, string or boolean cost, a BYOK
            upstream cost); the bill itself stays the server's own. None: the billed usage.
        fields_of: top-level fields added to the answer to one body (a provider that changes mid-run).
    """

    def __init__(
        self,
        answer: AnswerRule = echo_last_user_message,
        latency_s: float = 0.0,
        report_cost: bool = True,
        fault_rate: float = 0.0,
        kinds: tuple[str, ...] = LEGACY_KINDS,
        seed: int = 0,
        hang_s: float = 3.0,
        drip_s: float = 0.3,
        reject_auth: bool = False,
        served_model: str | None = None,
        extra_fields: dict | None = None,
        slots: int | None = None,
        when_busy: str = "queue",
        refuse_formats: tuple[str, ...] = (),
        count_tokens: Callable[[str], int] | None = None,
        price_in_per_token: float = 1e-6,
        price_out_per_token: float = 1e-6,
        tier_of: Callable[[dict], str | None] | None = None,
        show_usage: Callable[[dict, dict], dict] | None = None,
        fields_of: Callable[[dict], dict] | None = None,
    ) -> None:
        if when_busy not in ("queue", "429"):
            raise ValueError(f"when_busy must be queue or 429, got {when_busy!r}")
        unknown = set(kinds) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}")
        self.answer = answer
        self.latency_s = latency_s
        self.report_cost = report_cost
        self.fault_rate = fault_rate
        self.kinds = tuple(kinds)
        self.seed = seed
        self.hang_s = hang_s
        self.drip_s = drip_s
        self.reject_auth = reject_auth
        self.served_model = served_model
        self.extra_fields = dict(extra_fields or {})
        self.when_busy = when_busy
        self.refuse_formats = tuple(refuse_formats)
        self.count_tokens = count_tokens or (lambda text: len(text.split()))
        self.price_in_per_token = price_in_per_token
        self.price_out_per_token = price_out_per_token
        self.tier_of = tier_of or (lambda body: None)
        self.show_usage = show_usage
        self.fields_of = fields_of or (lambda body: {})
        self.billed: Counter[str] = Counter()  # responses, prompt_tokens, completion_tokens
        self.billed_cost = 0.0
        self.billed_by_prompt: Counter[str] = Counter()  # prompt -> billed replies
        self.billed_unshown: Counter[str] = Counter()
        self.billed_cost_shown = 0.0
        self.refused_formats: Counter[str] = Counter()  # response_format type -> refusals sent
        self.busy_refusals = 0  # 429s sent because every slot was taken
        # requests whose body never fully arrived (the client died while sending), and connections
        # the client reset before a request line could be read: the kernel drops what a reset
        # connection had queued, so a request sent whole may be among them
        self.cut_short = 0
        self.most_served = 0  # highest number of requests served at once (slots taken)
        self._serving = 0
        self._slots = threading.BoundedSemaphore(slots) if slots else None
        self.faults: list[Fault] = []  # injected by marker
        self.bodies: list[dict] = []
        self.authorizations: list[str] = []
        self.statuses: list[int] = []
        self.arrivals: list[float] = []
        self.requests: Counter[str] = Counter()  # prompt -> requests received
        self.answers: Counter[str] = Counter()  # prompt -> complete, correct answers sent
        self.served_faults: Counter[str] = Counter()  # fault kind -> times served
        self.in_flight = 0
        self.max_in_flight = 0
        self._doomed: dict[str, str] = {}  # marker -> fault kind served forever
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = _LoopbackServer(("127.0.0.1", 0), _handler_for(self))
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self.bodies)

    def requests_matching(self, marker: str) -> int:
        """How many requests (attempts included) had ``marker`` in the last user message."""
        return len(self.arrivals_matching(marker))

    def arrivals_matching(self, marker: str) -> list[float]:
        """Arrival times (``time.monotonic``) of the requests with ``marker``."""
        with self._lock:
            return [t for body, t in zip(self.bodies, self.arrivals) if marker in last_user_message(body)]

    def inject(
        self,
        marker: str | None,
        status: int | None = None,
        times: int | None = 1,
        retry_after: float | str | None = None,
        delay_s: float = 0.0,
        body: str | None = None,
        content_type: str = "application/json",
    ) -> Fault:
        """Serve ``status`` (after ``delay_s``) to the next ``times`` matching requests.

        ``status=None`` with ``delay_s`` makes a slow but successful response (for timeouts);
        ``status=200`` with ``body`` serves a malformed "success" (null content, HTML, ...).
        """
        fault = Fault(marker, status, times, retry_after, delay_s, content_type=content_type)
        if body is not None:
            fault.body = body
        with self._lock:
            self.faults.append(fault)
        return fault

    def doom(self, marker: str, kind: str = "500") -> None:
        """Serve ``kind`` forever to every request whose prompt contains ``marker``."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}")
        with self._lock:
            self._doomed[marker] = kind

    def spare(self, marker: str) -> None:
        """Stop serving the fault :meth:`doom` gave ``marker`` (the drawn faults go on)."""
        with self._lock:
            self._doomed.pop(marker, None)

    def heal(self) -> None:
        """Stop every drawn, doomed and injected fault (a provider that recovered)."""
        with self._lock:
            self.fault_rate = 0.0
            self._doomed.clear()
            self.faults.clear()

    def reset_counts(self) -> None:
        with self._lock:
            self.bodies.clear()
            self.authorizations.clear()
            self.statuses.clear()
            self.arrivals.clear()
            self.max_in_flight = 0
            self.most_served = 0
            self.busy_refusals = 0
            self.cut_short = 0
            self.refused_formats.clear()
            self.billed.clear()
            self.billed_cost = 0.0
            self.billed_by_prompt.clear()
            self.billed_unshown.clear()
            self.billed_cost_shown = 0.0

    def start(self) -> OpenAIServer:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # releases hanging handlers
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def prompt_tokens(self, body: dict) -> int:
        if "prompt" in body and "messages" not in body:
            return self.count_tokens(str(body["prompt"]))
        return sum(self.count_tokens(str(m.get("content", ""))) for m in body.get("messages", []))

    def usage_of(self, body: dict, generated: str) -> dict:
        """The usage the server bills for generating ``generated`` in answer to ``body``."""
        prompt, completion = self.prompt_tokens(body), self.count_tokens(generated)
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        share = 0.5 if self.tier_of(body) == "flex" else 1.0
        usage["cost"] = round(share * (self.price_in_per_token * prompt + self.price_out_per_token * completion), 12)
        return usage

    def bill(self, usage: dict, kind: str | None = None, prompt: str | None = None) -> None:
        """Record one billed reply of ``kind`` to ``prompt`` (called once its body was written whole);
        what the body showed is counted apart: ``billed_unshown`` (tokens of replies without usage)
        and ``billed_cost_shown`` (the cost the bodies reported)."""
        with self._lock:
            if prompt is not None:
                self.billed_by_prompt[prompt] += 1
            self.billed["responses"] += 1
            self.billed["prompt_tokens"] += usage["prompt_tokens"]
            self.billed["completion_tokens"] += usage["completion_tokens"]
            self.billed_cost += usage["cost"]
            if kind == "no_usage":
                self.billed_unshown["responses"] += 1
                self.billed_unshown["prompt_tokens"] += usage["prompt_tokens"]
                self.billed_unshown["completion_tokens"] += usage["completion_tokens"]
            elif self.report_cost and kind != "no_cost":
                self.billed_cost_shown += usage["cost"]

    def completion(self, body: dict, text: str | None = None) -> dict:
        """An answer in the OpenAI shape (``text`` defaults to the answer rule's)."""
        text = self.answer(body) if text is None else text
        usage = self.usage_of(body, text)
        if not self.report_cost:
            usage.pop("cost")
        if self.show_usage is not None:
            usage = self.show_usage(body, usage)
        if "prompt" in body and "messages" not in body:
            choice = {"index": 0, "text": text, "finish_reason": "stop"}
        else:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        return {
            "id": f"chatcmpl-{len(self.bodies)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.served_model or body.get("model", ""),
            **routed_provider(body),
            **self.extra_fields,
            **self.fields_of(body),
            **({"service_tier": tier} if (tier := self.tier_of(body)) is not None else {}),
            "choices": [choice],
            "usage": usage,
        }

    # called from handler threads
    def _admit(self, body: dict, authorization: str) -> Fault | str | None:
        """Count the request; returns the injected Fault or drawn fault kind to serve, if any."""
        prompt = last_user_message(body)
        with self._lock:
            self.bodies.append(body)
            self.authorizations.append(authorization)
            self.arrivals.append(time.monotonic())
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            attempt = self.requests[prompt]
            self.requests[prompt] += 1
            for fault in self.faults:
                if fault.matches(body) and (fault.times is None or fault.times > 0):
                    if fault.times is not None:
                        fault.times -= 1
                    return fault
            kind = self._draw(prompt, attempt)
            if kind:
                self.served_faults[kind] += 1
            return kind

    def _draw(self, prompt: str, attempt: int) -> str | None:
        for marker, kind in self._doomed.items():
            if marker in prompt:
                return kind
        if not self.fault_rate:
            return None
        rng = random.Random(f"{self.seed}|{prompt}|{attempt}")
        return rng.choice(self.kinds) if rng.random() < self.fault_rate else None

    def _take_slot(self) -> bool:
        """Take a serving slot (waiting or not, per ``when_busy``); False: refused as busy."""
        if self._slots is not None and not self._slots.acquire(blocking=self.when_busy == "queue"):
            with self._lock:
                self.busy_refusals += 1
            return False
        with self._lock:
            self._serving += 1
            self.most_served = max(self.most_served, self._serving)
        return True

    def _free_slot(self) -> None:
        with self._lock:
            self._serving -= 1
        if self._slots is not None:
            self._slots.release()

    def _leave(self, status: int) -> None:
        with self._lock:
            self.in_flight -= 1
            self.statuses.append(status)

    def _answered(self, prompt: str) -> None:
        with self._lock:
            self.answers[prompt] += 1


def _handler_for(server: OpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers
        # Headers and body go out in two writes; with Nagle on, the body would wait for the
        # client's delayed ACK (40 ms on Linux) on every response. Real servers disable it too.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args) -> None:  # keep test output quiet
            pass

        def handle_one_request(self) -> None:
            try:
                super().handle_one_request()
            except ConnectionResetError:  # reset while its request line was read: maybe a request lost
                with server._lock:
                    server.cut_short += 1
                self.close_connection = True

        def do_GET(self) -> None:  # noqa: N802 (http.server naming)
            if self.path.rstrip("/").endswith("/_stats"):  # counters, for a server in another process
                with server._lock:
                    stats = {"requests": len(server.bodies), "max_in_flight": server.max_in_flight}
                self._send(200, json.dumps(stats))
            else:
                self._send(404, '{"error": {"message": "not found"}}')

        def do_POST(self) -> None:  # noqa: N802 (http.server naming)
            length = int(self.headers.get("Content-Length") or 0)
            if self.path.rstrip("/").endswith("/_reset"):
                self.rfile.read(length)
                server.reset_counts()
                self._send(200, "{}")
                return
            if not self.path.rstrip("/").endswith(("/chat/completions", "/completions")):
                self.rfile.read(length)
                self._send(404, '{"error": {"message": "not found"}}')
                return
            raw = self.rfile.read(length)
            if len(raw) < length:  # the client died while sending: nothing to answer, nothing to log
                with server._lock:
                    server.cut_short += 1
                self.close_connection = True
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, '{"error": {"message": "invalid JSON"}}')
                return
            authorization = self.headers.get("Authorization", "")
            fault = server._admit(body, authorization)
            status = 200
            slot = False
            try:
                kind = (body.get("response_format") or {}).get("type")
                if kind in server.refuse_formats:
                    status = 500
                    with server._lock:
                        server.refused_formats[kind] += 1
                    self._send(500, json.dumps({"error": {"message": _LLAMA_REFUSAL, "type": "internal_server_error"}}))
                    return
                slot = server._take_slot()
                if not slot:
                    status = 429
                    self._send(429, '{"error": {"message": "server busy: no free slot"}}')
                    return
                if server.reject_auth:
                    status = 401
                    echo = f'{{"error": {{"message": "Invalid API key ...{authorization[-4:]}", "code": 401}}}}'
                    self._send(401, echo)
                    return
                time.sleep(server.latency_s + (fault.delay_s if isinstance(fault, Fault) else 0.0))
                if isinstance(fault, Fault) and fault.status:
                    status = fault.status
                    headers = {} if fault.retry_after is None else {"Retry-After": str(fault.retry_after)}
                    self._send(status, fault.body, headers, fault.content_type)
                elif isinstance(fault, str):
                    status = self._serve_fault(fault, body)
                else:
                    reply = server.completion(body)
                    self._send(200, json.dumps(reply))
                    server.bill(server.usage_of(body, _text_of(reply)), prompt=last_user_message(body))
                    server._answered(last_user_message(body))
            except (BrokenPipeError, ConnectionResetError):
                status = 499  # the client gave up (timeout)
                self.close_connection = True
            finally:
                if slot:
                    server._free_slot()
                server._leave(status)

        def _serve_fault(self, kind: str, body: dict) -> int:
            """Serve the drawn fault ``kind``; returns the status sent (0: none); bill it if it is billed."""
            answer = server.completion(body)  # the answer rule runs once per request
            text = _text_of(answer)
            billed = billed_usage(server, kind, body, text)
            shown = dict(billed)
            if not server.report_cost:
                shown.pop("cost")
            status, whole = self._serve_kind(kind, body, {**answer, "usage": shown}, text)
            if kind in BILLED_KINDS and status == 200 and whole:
                server.bill(billed, kind, last_user_message(body))
            return status

        def _serve_kind(self, kind: str, body: dict, answer: dict, text: str) -> tuple[int, bool]:
            """Send the reply of ``kind``: (the status sent, 0 for none; whether the body went out whole)."""
            if kind in ("429_retry_after", "429", "retry_after_date"):
                headers = {}
                if kind == "429_retry_after":
                    headers["Retry-After"] = RETRY_AFTER_S
                elif kind == "retry_after_date":  # one second ahead, in UTC, written without a zone
                    headers["Retry-After"] = email.utils.formatdate(time.time() + 1, usegmt=True)[:-4]
                self._send(429, '{"error": {"message": "rate limited"}}', headers)
                return 429, True
            if kind == "500":
                self._send(500, '{"error": {"message": "internal error"}}')
                return 500, True
            if kind == "hang":
                server._stopping.wait(server.hang_s)
                self.close_connection = True
                return 0, False
            if kind == "reset":
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                return 0, False
            whole = True
            payload = json.dumps(answer)
            if kind == "truncated":
                self._send(200, payload, cut_at=len(payload) // 2)
            elif kind == "truncated_json":
                self._send(200, payload[: len(payload) // 2])
            elif kind == "html":
                self._send(200, "<html><body><h1>502 Bad Gateway</h1></body></html>", content_type="text/html")
            elif kind == "bad_gzip":
                self._send(200, payload, {"Content-Encoding": "gzip"}, raw=b"\x1f\x8b\x08\x00not-gzip-at-all")
            elif kind in ("slow_drip", "slow_drip_over"):
                seconds = server.drip_s if kind == "slow_drip" else server.hang_s
                whole = self._drip(payload.encode("utf-8"), seconds)
                if kind == "slow_drip" and whole:
                    server._answered(last_user_message(body))
            elif kind == "stream_body":
                self._send(200, _event_stream(answer, text), content_type="text/event-stream")
                server._answered(last_user_message(body))
            else:
                self._send(200, json.dumps(json_reply(kind, answer, text)))
                if kind in READABLE_KINDS:
                    server._answered(last_user_message(body))
            return 200, whole

        def _drip(self, data: bytes, seconds: float) -> bool:
            """Send ``data`` in ten pieces spread over ``seconds``; False: the server stopped it halfway."""
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            step = max(1, len(data) // 10)
            for start in range(0, len(data), step):
                if server._stopping.wait(seconds / 10):
                    self.close_connection = True
                    return False
                self.wfile.write(data[start : start + step])
                self.wfile.flush()
            return True

        def _send(
            self,
            status: int,
            payload: str,
            headers: dict | None = None,
            content_type: str = "application/json",
            cut_at: int | None = None,
            raw: bytes | None = None,
        ) -> None:
            data = payload.encode("utf-8") if raw is None else raw
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            if cut_at is None:
                self.wfile.write(data)
            else:
                self.wfile.write(data[:cut_at])
                self.wfile.flush()
                self.close_connection = True

    return Handler


# What llama_cpp.server (0.3) answers to ``response_format: {"type": "json_schema", ...}``.
_LLAMA_REFUSAL = (
    "[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
    "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema', "
    "'ctx': {'expected': \"'text' or 'json_object'\"}}]"
)


#: Reply kinds whose body carries the right answer where a client can read it.
READABLE_KINDS = frozenset({"parts", "no_usage", "no_cost", "tool_calls", "stream_body", "slow_drip"})


def json_reply(kind: str, answer: dict, text: str) -> dict:
    """The JSON body of a reply of ``kind`` built from the complete ``answer`` (whose ``usage``
    is what the server bills for it): the shapes a synchronous reply and a batch output line share.

    A ``/v1/completions`` answer (its choice has ``text``) gets the same fault on ``text``;
    ``refusal``, ``tool_calls`` and ``reasoning_only`` exist only as chat messages, so they replace
    its ``text`` by one, and ``parts`` leaves it whole."""
    reply = json.loads(json.dumps(answer))
    choice = reply["choices"][0]
    key = "text" if "text" in choice else "message"

    def say(content: str | None, finish_reason: str | None = None) -> None:
        choice[key] = content if key == "text" else {"role": "assistant", "content": content}
        if finish_reason:
            choice["finish_reason"] = finish_reason

    def message(finish_reason: str, **fields) -> None:
        choice.pop(key, None)
        choice["message"] = {"role": "assistant", "content": None, **fields}
        choice["finish_reason"] = finish_reason

    if kind == "null_content":
        say(None)
    elif kind == "missing_message":
        choice.pop(key, None)
    elif kind == "empty_choices":
        reply["choices"] = []
    elif kind == "error_object":
        return {"error": {"message": "upstream provider error", "code": 502}}
    elif kind in ("empty_stop", "empty_error"):
        say("", "stop" if kind == "empty_stop" else "error")
    elif kind == "parts" and key == "message":
        half = len(text) // 2
        say([{"type": "text", "text": text[:half]}, {"type": "text", "text": text[half:]}])
    elif kind == "mismatch_same":
        reply["model"] = OTHER_MODEL
    elif kind == "mismatch_other":
        say("[]")
        reply["model"] = OTHER_MODEL
    elif kind == "length":
        say(text[: len(text) // 2], "length")
    elif kind == "no_usage":
        reply.pop("usage", None)
    elif kind == "no_cost":
        reply.get("usage", {}).pop("cost", None)
    elif kind == "refusal":
        message("stop", refusal=REFUSAL_TEXT)
    elif kind == "two_choices":
        say("[]")
        wrong = json.loads(json.dumps(choice))
        say(text)
        reply["choices"] = [wrong, {**choice, "index": 1}]
    elif kind == "tool_calls":
        call = {"id": "call_0", "type": "function", "function": {"name": "answer", "arguments": text}}
        message("tool_calls", tool_calls=[call])
    elif kind == "reasoning_only":
        message("length", reasoning=REASONING_TEXT)
    return reply


def billed_usage(server: OpenAIServer, kind: str | None, body: dict, text: str) -> dict:
    """The usage the server bills for a reply of ``kind`` (None: a plain answer)."""
    if kind == "length":  # cut after one token: that is what it generated and says
        usage = server.usage_of(body, "")
        usage["completion_tokens"] = 1
        usage["total_tokens"] += 1
        usage["cost"] = round(usage["cost"] + server.price_out_per_token, 12)
        return usage
    return server.usage_of(body, _generated(kind, text) if kind else text)


def _text_of(reply: dict) -> str:
    choice = reply["choices"][0]
    return choice.get("text") if "text" in choice else (choice.get("message") or {}).get("content", "")


def _generated(kind: str, text: str) -> str:
    """What the model generated for a reply of ``kind`` (what its completion tokens count)."""
    if kind == "refusal":
        return REFUSAL_TEXT
    if kind == "reasoning_only":
        return REASONING_TEXT
    if kind == "two_choices":
        return "[]" + text
    if kind == "mismatch_other":
        return "[]"
    if kind in ("empty_stop", "empty_error"):
        return ""
    return text


def _event_stream(reply: dict, text: str) -> str:
    """``reply`` as Server-Sent Events: the text in three delta chunks, the finish, the usage, [DONE]
    (``text_completion`` chunks with ``text`` pieces for a ``/v1/completions`` reply)."""
    chat = "text" not in reply["choices"][0]
    base = {
        "id": reply["id"],
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": reply["created"],
        "model": reply["model"],
    }
    third = max(1, len(text) // 3)
    pieces = [text[:third], text[third : 2 * third], text[2 * third :]]

    def piece(n: int, content: str) -> dict:
        if not chat:
            return {"index": 0, "text": content, "finish_reason": None}
        return {"index": 0, "delta": {"role": "assistant", "content": content} if n == 0 else {"content": content}}

    chunks = [{**base, "choices": [piece(n, content)]} for n, content in enumerate(pieces)]
    last = (
        {"index": 0, "delta": {}, "finish_reason": "stop"}
        if chat
        else {"index": 0, "text": "", "finish_reason": "stop"}
    )
    chunks.append({**base, "choices": [last]})
    chunks.append({**base, "choices": [], "usage": reply["usage"]})
    return "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"


class _LoopbackServer(ThreadingHTTPServer):
    request_queue_size = 256  # many concurrent connects must not overflow the listen backlog
    daemon_threads = True  # a handler still sleeping (slow response) must not block stop()


# The names the tests used for the two servers this one replaced.
FakeOpenAIServer = OpenAIServer
FaultServer = OpenAIServer


def main() -> None:
    """Serve until stdin closes: ``python -m tests.helpers.openai_server --latency 0.2``.

    Prints the base URL as the first line of stdout, so a benchmark can run the server in its
    own process (its CPU then does not compete with the client's event loop for the GIL).
    """
    import argparse
    import sys

    parser = argparse.ArgumentParser(description="loopback OpenAI-compatible test server")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before every answer")
    args = parser.parse_args()
    with OpenAIServer(latency_s=args.latency) as server:
        print(server.base_url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
