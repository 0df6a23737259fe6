"""A loopback OpenAI-compatible chat server for tests and benchmarks (127.0.0.1 only).

It answers ``POST /v1/chat/completions`` with canned text chosen by a rule, and can inject
faults (429 with ``Retry-After``, 5xx, 4xx, slow responses) for requests whose last user
message contains a marker. It counts requests and the highest number in flight at once, and
keeps every request body and ``Authorization`` header so tests can check what was sent.

Usage::

    with FakeOpenAIServer(answer=lambda body: '["Friday"]', latency_s=0.05) as server:
        server.inject("flaky", status=429, times=2, retry_after=0.1)
        backend = OpenAIBackend(model_id="m", base_url=server.base_url)
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

AnswerRule = Callable[[dict], str]


def echo_last_user_message(body: dict) -> str:
    """Default rule: a JSON array holding the last user message."""
    users = [m.get("content", "") for m in body.get("messages", []) if m.get("role") == "user"]
    return json.dumps([users[-1] if users else ""])


def last_user_message(body: dict) -> str:
    users = [m.get("content", "") for m in body.get("messages", []) if m.get("role") == "user"]
    return users[-1] if users else ""


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


class FakeOpenAIServer:
    """Threaded HTTP server bound to 127.0.0.1 on a free port.

    Args:
        answer: rule mapping the request body to the answer text.
        latency_s: fixed delay before every response (simulates generation time).
        report_cost: include ``usage.cost`` (as OpenRouter does) in every answer.
    """

    def __init__(self, answer: AnswerRule = echo_last_user_message, latency_s: float = 0.0, report_cost: bool = True):
        self.answer = answer
        self.latency_s = latency_s
        self.report_cost = report_cost
        self.faults: list[Fault] = []
        self.bodies: list[dict] = []
        self.authorizations: list[str] = []
        self.statuses: list[int] = []
        self.arrivals: list[float] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
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

    def reset_counts(self) -> None:
        with self._lock:
            self.bodies.clear()
            self.authorizations.clear()
            self.statuses.clear()
            self.arrivals.clear()
            self.max_in_flight = 0

    def start(self) -> FakeOpenAIServer:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # called from handler threads
    def _admit(self, body: dict, authorization: str) -> Fault | None:
        with self._lock:
            self.bodies.append(body)
            self.authorizations.append(authorization)
            self.arrivals.append(time.monotonic())
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            for fault in self.faults:
                if fault.matches(body) and (fault.times is None or fault.times > 0):
                    if fault.times is not None:
                        fault.times -= 1
                    return fault
        return None

    def _leave(self, status: int) -> None:
        with self._lock:
            self.in_flight -= 1
            self.statuses.append(status)

    def completion(self, body: dict) -> dict:
        text = self.answer(body)
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(text.split()),
            "total_tokens": prompt_tokens + len(text.split()),
        }
        if self.report_cost:
            usage["cost"] = round(1e-6 * usage["total_tokens"], 9)
        return {
            "id": f"chatcmpl-{len(self.bodies)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", ""),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": usage,
        }


def _handler_for(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers
        # Headers and body go out in two writes; with Nagle on, the body would wait for the
        # client's delayed ACK (40 ms on Linux) on every response. Real servers disable it too.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args) -> None:  # keep test output quiet
            pass

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
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._send(400, '{"error": {"message": "invalid JSON"}}')
                return
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, '{"error": {"message": "not found"}}')
                return
            fault = server._admit(body, self.headers.get("Authorization", ""))
            status = 200
            try:
                time.sleep(server.latency_s + (fault.delay_s if fault else 0.0))
                if fault and fault.status:
                    status = fault.status
                    headers = {} if fault.retry_after is None else {"Retry-After": str(fault.retry_after)}
                    self._send(status, fault.body, headers, fault.content_type)
                else:
                    self._send(200, json.dumps(server.completion(body)))
            except (BrokenPipeError, ConnectionResetError):
                status = 499  # the client gave up (timeout)
            finally:
                server._leave(status)

        def _send(
            self, status: int, payload: str, headers: dict | None = None, content_type: str = "application/json"
        ) -> None:
            data = payload.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

    return Handler


class _LoopbackServer(ThreadingHTTPServer):
    request_queue_size = 256  # many concurrent connects must not overflow the listen backlog
    daemon_threads = True  # a handler still sleeping (slow response) must not block stop()


def main() -> None:
    """Serve until stdin closes: ``python -m tests.backends.fake_openai_server --latency 0.2``.

    Prints the base URL as the first line of stdout, so a benchmark can run the server in its
    own process (its CPU then does not compete with the client's event loop for the GIL).
    """
    import argparse
    import sys

    parser = argparse.ArgumentParser(description="loopback OpenAI-compatible test server")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before every answer")
    args = parser.parse_args()
    with FakeOpenAIServer(latency_s=args.latency) as server:
        print(server.base_url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
