"""A loopback OpenAI-compatible server that answers deterministically and injects faults.

The answer to a chat completion is a JSON array of the double-quoted words of the last user
message (``'Find "Friday" and "said"'`` -> ``["Friday", "said"]``), so a fault-free run and a
run through faults can be compared exactly. Whether the n-th request for a prompt gets a fault,
and which, is drawn from ``random.Random(f"{seed}|{prompt}|{n}")``: the same for every run and
independent of thread scheduling. The server counts requests, complete answers and faults per
prompt, so a test can prove that no answered prompt was asked for again.

Usage::

    with FaultServer(fault_rate=0.3, seed=1) as server:
        backend = OpenAIBackend(model_id="m", base_url=server.base_url, timeout_s=1)
"""

from __future__ import annotations

import json
import random
import re
import socket
import struct
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAULT_KINDS = (
    "429_retry_after",  # 429 with a short Retry-After
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
)
RETRY_AFTER_S = "0.05"


def quoted_words(prompt: str) -> list[str]:
    """The double-quoted words of ``prompt``, in order."""
    return re.findall(r'"([^"]+)"', prompt)


def last_user_message(body: dict) -> str:
    users = [m.get("content", "") for m in body.get("messages", []) if m.get("role") == "user"]
    return str(users[-1]) if users else ""


class FaultServer:
    """Threaded HTTP server on 127.0.0.1 (free port).

    Args:
        fault_rate: share of requests that get a fault, drawn per (prompt, attempt).
        kinds: which faults to draw from (uniformly).
        seed: seeds the draws.
        hang_s: how long a ``hang`` keeps the connection silent (beyond the client timeout).
        reject_auth: answer every request with 401, echoing the key's last characters as
            real providers do.
    """

    def __init__(
        self,
        fault_rate: float = 0.0,
        kinds: tuple[str, ...] = FAULT_KINDS,
        seed: int = 0,
        hang_s: float = 3.0,
        reject_auth: bool = False,
    ) -> None:
        unknown = set(kinds) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}")
        self.fault_rate = fault_rate
        self.kinds = tuple(kinds)
        self.seed = seed
        self.hang_s = hang_s
        self.reject_auth = reject_auth
        self.requests: Counter[str] = Counter()  # prompt -> requests received
        self.answers: Counter[str] = Counter()  # prompt -> complete answers sent
        self.faults: Counter[str] = Counter()  # fault kind -> times served
        self.authorizations: list[str] = []
        self._doomed: dict[str, str] = {}  # marker -> fault kind served forever
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _handler_for(self))
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def doom(self, marker: str, kind: str = "500") -> None:
        """Serve ``kind`` forever to every request whose prompt contains ``marker``."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}")
        with self._lock:
            self._doomed[marker] = kind

    def start(self) -> FaultServer:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # releases hanging handlers
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def completion(self, prompt: str, model: str) -> dict:
        """The deterministic answer, in the OpenAI chat completion shape."""
        text = json.dumps(quoted_words(prompt))
        return {
            "id": "chatcmpl-fault-server",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split())},
        }

    # called from handler threads
    def _admit(self, prompt: str, authorization: str) -> str | None:
        """Count the request; returns the fault to serve, if any."""
        with self._lock:
            attempt = self.requests[prompt]
            self.requests[prompt] += 1
            self.authorizations.append(authorization)
            kind = self._draw(prompt, attempt)
            if kind:
                self.faults[kind] += 1
            return kind

    def _draw(self, prompt: str, attempt: int) -> str | None:
        for marker, kind in self._doomed.items():
            if marker in prompt:
                return kind
        rng = random.Random(f"{self.seed}|{prompt}|{attempt}")
        return rng.choice(self.kinds) if rng.random() < self.fault_rate else None

    def _answered(self, prompt: str) -> None:
        with self._lock:
            self.answers[prompt] += 1


def _handler_for(server: FaultServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args) -> None:  # keep test output quiet
            pass

        def do_POST(self) -> None:  # noqa: N802 (http.server naming)
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._send(400, '{"error": {"message": "invalid JSON"}}')
                return
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, '{"error": {"message": "not found"}}')
                return
            authorization = self.headers.get("Authorization", "")
            if server.reject_auth:
                server._admit(last_user_message(body), authorization)
                echo = f'{{"error": {{"message": "Invalid API key ...{authorization[-4:]}", "code": 401}}}}'
                self._send(401, echo)
                return
            prompt = last_user_message(body)
            fault = server._admit(prompt, authorization)
            try:
                if fault:
                    self._serve_fault(fault, prompt, body)
                else:
                    self._send(200, json.dumps(server.completion(prompt, body.get("model", ""))))
                    server._answered(prompt)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def _serve_fault(self, kind: str, prompt: str, body: dict) -> None:
            answer = json.dumps(server.completion(prompt, body.get("model", "")))
            if kind == "429_retry_after":
                self._send(429, '{"error": {"message": "rate limited"}}', {"Retry-After": RETRY_AFTER_S})
            elif kind == "429":
                self._send(429, '{"error": {"message": "rate limited"}}')
            elif kind == "500":
                self._send(500, '{"error": {"message": "internal error"}}')
            elif kind == "hang":
                server._stopping.wait(server.hang_s)
                self.close_connection = True
            elif kind == "reset":
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
            elif kind == "truncated":
                self._send(200, answer, cut_at=len(answer) // 2)
            elif kind == "truncated_json":
                self._send(200, answer[: len(answer) // 2])
            elif kind == "null_content":
                self._send(200, _with_message(answer, {"role": "assistant", "content": None}))
            elif kind == "missing_message":
                self._send(200, _with_message(answer, None))
            elif kind == "empty_choices":
                self._send(200, json.dumps({**json.loads(answer), "choices": []}))
            elif kind == "html":
                self._send(200, "<html><body><h1>502 Bad Gateway</h1></body></html>", content_type="text/html")
            elif kind == "error_object":
                self._send(200, '{"error": {"message": "upstream provider error", "code": 502}}')

        def _send(
            self,
            status: int,
            payload: str,
            headers: dict | None = None,
            content_type: str = "application/json",
            cut_at: int | None = None,
        ) -> None:
            data = payload.encode("utf-8")
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


def _with_message(answer: str, message: dict | None) -> str:
    """``answer`` with its first choice's message replaced (None: removed)."""
    completion = json.loads(answer)
    choice = completion["choices"][0]
    if message is None:
        choice.pop("message")
    else:
        choice["message"] = message
    return json.dumps(completion)


class _Server(ThreadingHTTPServer):
    request_queue_size = 256
    daemon_threads = True  # a hanging handler must not block stop()
