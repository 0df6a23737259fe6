"""A loopback OpenAI Batch API (files + batches) on the fault server, for the batch-mode tests.

:class:`BatchServer` is an :class:`~tests.helpers.openai_server.OpenAIServer` (the synchronous
endpoints stay, so a client can fall back to them) that also serves:

* ``POST /v1/files`` (multipart: ``purpose=batch``, ``file``: JSONL request lines),
  ``GET /v1/files/{id}`` and ``GET /v1/files/{id}/content``;
* ``POST /v1/batches`` (``input_file_id``, ``endpoint``, ``completion_window``, ``metadata``),
  ``GET /v1/batches/{id}``, ``GET /v1/batches`` and ``POST /v1/batches/{id}/cancel``;
* OpenRouter's dialect on the same paths: ``POST /v1/batches`` with ``endpoint``, ``model`` (a
  ``:batch`` variant, which every request body must match) and ``requests`` inline (answered
  202), and ``GET /v1/batches/{id}/results`` in pages (``cursor``, ``has_more``,
  ``next_cursor``; ``page_size`` lines each).

A batch completes at its ``polls_to_complete``-th poll (never while the server is
:meth:`held <hold>`). Each line is answered as the synchronous endpoint answers it: the drawn,
doomed and injected reply kinds of the fault server apply (a batch output line can carry a null
content or a refusal; a kind that bills nothing, such as ``500`` or ``html``, becomes an error
line), and billed lines are billed as synchronous replies are (``billed``, ``billed_cost``,
``billed_by_prompt``, and ``batch_billed`` apart), at ``batch_discount`` of the price; output
bodies carry no ``usage.cost`` unless ``batch_report_cost`` (OpenAI's do not).
Faults of the batch itself: :meth:`fail_in_batch` (lines with a marker go to the error file
with an HTTP status), :meth:`expire_next` and :meth:`cancel_next` (the next batch to complete
expires or is cancelled with only its first ``done`` lines answered, the others in the error
file with ``batch_expired`` / ``batch_cancelled``), :meth:`fail_next_validation`,
:meth:`forget_next` (a batch deleted before it completed: 404 on its polls), and the cancel endpoint. Duplicate ``custom_id``s or a line whose ``url`` is not the batch's endpoint
fail validation, as OpenAI's do.

It records ``uploads`` ((file id, lines)), ``created`` (batch ids), ``polls`` per batch,
``cancel_requests`` and ``batch_lines`` (custom_id -> times submitted in any batch), so a test
can prove nothing was submitted twice. ``python -m tests.helpers.batch_server`` serves in its
own process (a client can be SIGKILLed while it lives) with ``POST /v1/_control``
(``{"hold": bool}``) and ``GET /v1/_stats``.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from email import policy
from email.parser import BytesParser

from tests.helpers.openai_server import (
    BILLED_KINDS,
    READABLE_KINDS,
    Fault,
    OpenAIServer,
    _handler_for,
    _text_of,
    billed_usage,
    json_reply,
    last_user_message,
)

ACTIVE = ("validating", "in_progress", "finalizing", "cancelling")
EXPIRED_MESSAGE = "This request could not be executed before the completion window expired."
CANCELLED_MESSAGE = "This request was not executed because the batch was cancelled."
#: The status of the error line a reply kind that bills nothing becomes in a batch (others: 500).
LINE_STATUS = {"429": 429, "429_retry_after": 429, "retry_after_date": 429, "error_object": 502}


@dataclass
class Batch:
    """One batch and what the server has decided for it."""

    id: str
    input_file_id: str
    endpoint: str
    window: str
    metadata: dict
    lines: list[dict]
    created_at: int
    status: str = "in_progress"
    polls: int = 0
    errors: dict | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    counts: dict = field(default_factory=lambda: {"total": 0, "completed": 0, "failed": 0})
    ended: dict = field(default_factory=dict)  # completed_at / expired_at / cancelled_at / failed_at

    def as_json(self) -> dict:
        stamps = ("in_progress_at", "finalizing_at", "completed_at", "failed_at", "expired_at", "cancelling_at")
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": self.errors,
            "input_file_id": self.input_file_id,
            "completion_window": self.window,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            **{stamp: self.ended.get(stamp) for stamp in stamps},
            "cancelled_at": self.ended.get("cancelled_at"),
            "expires_at": self.created_at + 86_400,
            "request_counts": dict(self.counts),
            "metadata": self.metadata,
        }


class BatchServer(OpenAIServer):
    """The fault server plus the Batch API (see the module docstring)."""

    def __init__(
        self,
        *args,
        polls_to_complete: int = 2,
        batch_discount: float = 0.5,
        batch_report_cost: bool = False,
        page_size: int = 4,
        **kwargs,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.polls_to_complete = polls_to_complete
        self.page_size = page_size
        self.batch_discount = batch_discount
        self.batch_report_cost = batch_report_cost  # OpenAI's batch output bodies carry no usage.cost
        self.files: dict[str, tuple[str, bytes]] = {}  # id -> (purpose, content)
        self.file_objects: dict[str, dict] = {}  # id -> the file object the API returns
        self.batches: dict[str, Batch] = {}
        self.uploads: list[tuple[str, int]] = []
        self.created: list[str] = []
        self.forgotten: list[str] = []  # batch ids deleted by forget_next
        self.polls: Counter[str] = Counter()
        self.cancel_requests: list[str] = []
        self.batch_lines: Counter[str] = Counter()
        self.batch_billed: Counter[str] = Counter()  # what batch lines billed (also in ``billed``)
        self._held = False
        self._line_faults: list[Fault] = []
        self._next_end: tuple[str, int] | None = None  # ("expired" | "cancelled", lines answered)
        self._fail_validation = False
        self._accept_then_502 = 0  # creates accepted (the batch runs and bills) but answered 502
        self._odd_output: list[str] = []  # "duplicate" / "unnamed": extra lines in the next output
        self._framing = {"bom": False, "separator": False, "drop": 0}  # of every output file from now on
        self._throttled_polls = (0, "1")  # (polls answered 429, their Retry-After)
        self._stuck_cursor = False  # results pages that repeat their cursor and never clear has_more
        self._forget = 0  # batches forgotten (deleted, 404 from then on) at their next poll
        self._ids = 0
        self._batch_lock = threading.RLock()
        self._server.RequestHandlerClass = _batch_handler_for(self)

    # ----- controls ------------------------------------------------------------------------------

    def hold(self) -> None:
        """Keep every batch in progress (polls still count) until :meth:`release`."""
        with self._batch_lock:
            self._held = True

    def release(self) -> None:
        with self._batch_lock:
            self._held = False

    def fail_in_batch(self, marker: str, status: int = 500, times: int | None = None) -> None:
        """Lines whose prompt has ``marker`` go to the error file with ``status`` (``times`` lines; None: all)."""
        with self._batch_lock:
            self._line_faults.append(Fault(marker, status, times))

    def expire_next(self, done: int) -> None:
        """The next batch to complete expires instead, with only its first ``done`` lines answered."""
        with self._batch_lock:
            self._next_end = ("expired", done)

    def cancel_next(self, done: int) -> None:
        """The next batch to complete is cancelled by the provider, with its first ``done`` lines answered."""
        with self._batch_lock:
            self._next_end = ("cancelled", done)

    def fail_next_validation(self) -> None:
        """The next batch created fails validation: ``failed`` with an ``errors`` object, no output."""
        with self._batch_lock:
            self._fail_validation = True

    def accept_then_fail(self, times: int = 1) -> None:
        """The next ``times`` creates are accepted (the batch exists, runs and bills) but answered 502."""
        with self._batch_lock:
            self._accept_then_502 = times

    def odd_output(self, *kinds: str) -> None:
        """The next batch's output also holds, per kind: ``duplicate`` (its first line again, with
        another answer: a second answer the server does not bill) or ``unnamed`` (a line without a
        ``custom_id``)."""
        with self._batch_lock:
            self._odd_output = list(kinds)

    def frame_output(self, bom: bool = False, separator: bool = False, drop: int = 0) -> None:
        """Every output file from now on: a UTF-8 byte-order mark first (``bom``), a U+2028 line
        separator inside a string of every line (``separator``: legal JSON), and its first ``drop``
        answered lines left out while ``request_counts.completed`` still counts them (billed)."""
        with self._batch_lock:
            self._framing = {"bom": bom, "separator": separator, "drop": drop}

    def throttle_polls(self, times: int, retry_after: str = "1") -> None:
        """The next ``times`` polls are answered 429 with ``Retry-After: retry_after`` (the batch runs on)."""
        with self._batch_lock:
            self._throttled_polls = (times, retry_after)

    def stick_cursor(self) -> None:
        """Every results page from now on says ``has_more`` with the cursor it was asked for."""
        with self._batch_lock:
            self._stuck_cursor = True

    def forget_next(self, times: int = 1) -> None:
        """The next ``times`` batches polled are forgotten first: deleted unbilled, 404 from then on
        (a batch deleted at the provider, or another account's)."""
        with self._batch_lock:
            self._forget = times

    def throttled(self) -> str | None:
        """The Retry-After of a poll to answer 429 (None: answer it)."""
        with self._batch_lock:
            times, value = self._throttled_polls
            if times <= 0:
                return None
            self._throttled_polls = (times - 1, value)
            return value

    # ----- the API -------------------------------------------------------------------------------

    def _new_id(self, prefix: str) -> str:
        with self._batch_lock:
            self._ids += 1
            return f"{prefix}-{self._ids:04d}"

    def upload(self, purpose: str, content: bytes, filename: str = "input.jsonl") -> dict:
        file_id = self._new_id("file")
        with self._batch_lock:
            self.uploads.append((file_id, len([line for line in content.splitlines() if line.strip()])))
            return self._keep(file_id, purpose, content, filename)

    def _keep(self, file_id: str, purpose: str, content: bytes, filename: str) -> dict:
        self.files[file_id] = (purpose, content)
        self.file_objects[file_id] = {
            "id": file_id,
            "object": "file",
            "bytes": len(content),
            "created_at": int(time.time()),
            "filename": filename,
            "purpose": purpose,
        }
        return self.file_objects[file_id]

    def create(self, request: dict) -> tuple[int, dict]:
        status, batch = self._create_any(request)
        with self._batch_lock:
            if status in (200, 202) and self._accept_then_502:
                self._accept_then_502 -= 1
                return 502, {"error": {"message": "bad gateway (the batch was created)", "type": "server_error"}}
        return status, batch

    def _create_any(self, request: dict) -> tuple[int, dict]:
        if "requests" in request:
            return self._create_inline(request)
        file_id = request.get("input_file_id")
        if file_id not in self.files:
            return 404, {"error": {"message": f"No such File object: {file_id}", "type": "invalid_request_error"}}
        lines = []
        for line in self.files[file_id][1].splitlines():
            if line.strip():
                try:
                    lines.append(json.loads(line))
                except ValueError:
                    lines.append({"unparsable": line.decode("utf-8", "replace")})
        return self._create(file_id, request, lines)

    def _create_inline(self, request: dict) -> tuple[int, dict]:
        """OpenRouter's dialect: the lines inline, one batch-level ``:batch`` model every body matches."""
        model = str(request.get("model") or "")
        if list(request)[:2] != ["endpoint", "model"]:
            return 400, {"error": {"message": "endpoint and model must come before requests"}}
        if not model.endswith(":batch"):
            return 400, {"error": {"message": f"model {model} is not a :batch variant"}}
        lines = []
        for item in request["requests"]:
            if item["body"].get("model", model) != model:
                return 400, {"error": {"message": "a request's model differs from the batch's"}}
            lines.append({"custom_id": item["custom_id"], "url": request["endpoint"], "body": item["body"]})
        status, batch = self._create(None, request, lines)
        return (202 if status == 200 else status), {**batch, "model": model}

    def _create(self, file_id: str | None, request: dict, lines: list[dict]) -> tuple[int, dict]:
        batch = Batch(
            self._new_id("batch"),
            file_id,
            str(request.get("endpoint")),
            str(request.get("completion_window")),
            dict(request.get("metadata") or {}),
            lines,
            int(time.time()),
        )
        batch.counts["total"] = len(lines)
        problems = self._validation_problems(batch)
        with self._batch_lock:
            if self._fail_validation:
                problems.append({"code": "invalid_request", "message": "injected validation failure", "line": 1})
                self._fail_validation = False
            if problems:
                batch.status, batch.errors = "failed", {"object": "list", "data": problems}
                batch.ended["failed_at"] = int(time.time())
            else:
                for line in lines:
                    self.batch_lines[str(line.get("custom_id"))] += 1
            self.batches[batch.id] = batch
            self.created.append(batch.id)
            if file_id is None:
                self.uploads.append(("inline", len(lines)))
        return 200, batch.as_json()

    @staticmethod
    def _validation_problems(batch: Batch) -> list[dict]:
        problems, seen = [], set()
        for number, line in enumerate(batch.lines, 1):
            if "unparsable" in line:
                problems.append({"code": "invalid_json_line", "message": "this line is not JSON", "line": number})
                continue
            custom_id = line.get("custom_id")
            if custom_id in seen:
                problems.append(
                    {"code": "duplicate_custom_id", "message": f"duplicate custom_id {custom_id}", "line": number}
                )
            seen.add(custom_id)
            if line.get("url") != batch.endpoint:
                problems.append(
                    {"code": "invalid_url", "message": f"url {line.get('url')} is not {batch.endpoint}", "line": number}
                )
        return problems

    def poll(self, batch_id: str) -> tuple[int, dict]:
        with self._batch_lock:
            batch = self.batches.get(batch_id)
            if batch is not None and self._forget and batch.status in ("validating", "in_progress"):
                self._forget -= 1
                self.forgotten.append(self.batches.pop(batch_id).id)
                batch = None
            if batch is None:
                return 404, {"error": {"message": f"No such Batch object: {batch_id}"}}
            self.polls[batch_id] += 1
            batch.polls += 1
            if batch.status == "cancelling":
                self._finish(batch, "cancelled", 0)
            elif batch.status in ("validating", "in_progress") and not self._held:
                if batch.polls >= self.polls_to_complete:
                    end, done = self._next_end or ("completed", len(batch.lines))
                    self._next_end = None
                    self._finish(batch, end, done)
            return 200, batch.as_json()

    def cancel(self, batch_id: str) -> tuple[int, dict]:
        with self._batch_lock:
            batch = self.batches.get(batch_id)
            if batch is None:
                return 404, {"error": {"message": f"No such Batch object: {batch_id}"}}
            self.cancel_requests.append(batch_id)
            if batch.status in ("validating", "in_progress"):
                batch.status = "cancelling"
                batch.ended["cancelling_at"] = int(time.time())
            return 200, batch.as_json()

    def _finish(self, batch: Batch, end: str, done: int) -> None:
        """Answer the first ``done`` lines; the rest go to the error file with the end's code."""
        output, errors = [], []
        for number, line in enumerate(batch.lines):
            if number >= done:
                code, message = (
                    ("batch_expired", EXPIRED_MESSAGE) if end == "expired" else ("batch_cancelled", CANCELLED_MESSAGE)
                )
                errors.append(self._error_line(line, None, {"code": code, "message": message}))
                continue
            item, failed = self._answer_line(line)
            (errors if failed else output).append(item)
        batch.counts.update(completed=len(output), failed=len(errors))  # the requests, not the odd lines
        answered, output = output, output[self._framing["drop"] :]  # billed lines left out of the file
        for kind in self._odd_output if answered else ():
            if kind == "duplicate" and output:  # a second, disagreeing line for a request the file answers
                other = json.loads(json.dumps(output[0]))
                other["response"]["body"]["choices"][0]["message"]["content"] = '["disagreeing"]'
                output.append(other)
            elif kind != "duplicate":
                output.append({**answered[0], "custom_id": None})
        self._odd_output = []
        if output:
            batch.output_file_id = self._store(output, framed=True)
        if errors:
            batch.error_file_id = self._store(errors)
        batch.status = end
        batch.ended[f"{end}_at"] = int(time.time())

    def results_page(self, batch_id: str, cursor: str | None) -> tuple[int, dict]:
        """OpenRouter's results: output and error lines together, ``page_size`` a page."""
        with self._batch_lock:
            batch = self.batches.get(batch_id)
            if batch is None or batch.status in ACTIVE:
                return 404, {"error": {"message": f"no results for {batch_id} yet"}}
            items = []
            for file_id in (batch.output_file_id, batch.error_file_id):
                if file_id:
                    items += [json.loads(line) for line in self.files[file_id][1].splitlines() if line.strip()]
        if self._stuck_cursor:
            return 200, {"object": "list", "data": items[: self.page_size], "has_more": True, "next_cursor": "0"}
        start = int(cursor or 0)
        page = items[start : start + self.page_size]
        more = start + self.page_size < len(items)
        return 200, {
            "object": "list",
            "data": page,
            "has_more": more,
            "next_cursor": str(start + self.page_size) if more else None,
        }

    def _store(self, items: list[dict], framed: bool = False) -> str:
        file_id = self._new_id("file")
        framing = self._framing if framed else {}
        if framing.get("separator"):
            items = [{**item, "note": "served\u2028by the batch server"} for item in items]
        content = ("\n".join(json.dumps(i, ensure_ascii=False) for i in items) + "\n").encode()
        if framing.get("bom"):
            content = b"\xef\xbb\xbf" + content
        self._keep(file_id, "batch_output", content, f"{file_id}.jsonl")
        return file_id

    def _answer_line(self, line: dict) -> tuple[dict, bool]:
        """(the output or error line for one request line, whether it failed).

        The line meets what a synchronous request would: an :meth:`inject`-ed status becomes an
        error line with that status (a 200 with a JSON ``body``: that body, unbilled), a reply kind
        that bills goes to the output file in its JSON shape (``stream_body`` and ``slow_drip``: the
        plain answer), and one that does not (transport faults, ``html``, ``error_object``) becomes
        an error line: 429 for the rate limits, 502 for ``error_object``, 500 for the rest."""
        body = line.get("body") or {}
        for fault in self._line_faults:
            if fault.matches(body) and (fault.times is None or fault.times > 0):
                if fault.times is not None:
                    fault.times -= 1
                error = {"error": {"message": "injected batch line failure", "type": "server_error"}}
                return self._error_line(line, self._response(fault.status, error), None), True
        prompt = last_user_message(body)
        injected = self._admit(body, "")
        status = 200
        try:
            if isinstance(injected, Fault) and injected.status:
                try:
                    payload = json.loads(injected.body)
                except ValueError:
                    payload = None
                readable = isinstance(payload, dict)
                if not readable:
                    payload = {"error": {"message": injected.body, "type": "server_error"}}
                status = injected.status if readable or injected.status != 200 else 500
                return self._error_line(line, self._response(status, payload), None), status != 200
            kind = injected if isinstance(injected, str) else None
            if kind is not None and kind not in BILLED_KINDS:
                status = LINE_STATUS.get(kind, 500)
                error = {"error": {"message": f"upstream failure ({kind})", "type": "server_error"}}
                return self._error_line(line, self._response(status, error), None), True
            answer = self.completion(body)
            text = _text_of(answer)
            usage = billed_usage(self, kind, body, text)
            usage["cost"] = round(usage["cost"] * self.batch_discount, 12)
            shown = {k: v for k, v in usage.items() if k != "cost" or self.batch_report_cost}
            reply = json_reply(kind, {**answer, "usage": shown}, text) if kind else {**answer, "usage": shown}
            shows_cost = self.batch_report_cost and kind not in ("no_usage", "no_cost")
            self.bill(usage, kind if kind == "no_usage" or shows_cost else "no_cost", prompt)
            with self._lock:
                self.batch_billed["responses"] += 1
                self.batch_billed["prompt_tokens"] += usage["prompt_tokens"]
                self.batch_billed["completion_tokens"] += usage["completion_tokens"]
            if kind is None or kind in READABLE_KINDS:
                self._answered(prompt)
            return self._error_line(line, self._response(200, reply), None), False
        finally:
            self._leave(status)

    def _response(self, status: int, body: dict) -> dict:
        return {"status_code": status, "request_id": self._new_id("req"), "body": body}

    def _error_line(self, line: dict, response: dict | None, error: dict | None) -> dict:
        return {
            "id": self._new_id("batch_req"),
            "custom_id": line.get("custom_id"),
            "response": response,
            "error": error,
        }

    def stats(self) -> dict:
        with self._batch_lock:
            return {
                "uploads": len(self.uploads),
                "created": list(self.created),
                "polls": dict(self.polls),
                "batch_lines": dict(self.batch_lines),
                "billed": dict(self.billed),
                "billed_cost": self.billed_cost,
                "requests": self.request_count,
            }


def _multipart(content_type: str, data: bytes) -> dict[str, tuple[bytes, str | None]]:
    """The fields of a multipart/form-data body: name -> (content, filename)."""
    message = BytesParser(policy=policy.default).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + data)
    if not message.is_multipart():
        return {}
    return {
        part.get_param("name", header="content-disposition"): (part.get_payload(decode=True), part.get_filename())
        for part in message.iter_parts()
    }


def _batch_handler_for(server: BatchServer):
    base = _handler_for(server)

    class Handler(base):
        def _json(self, status: int, payload: dict) -> None:
            self._send(status, json.dumps(payload))

        def do_GET(self) -> None:  # noqa: N802 (http.server naming)
            path = self.path.split("?")[0].rstrip("/")
            parts = path.split("/")
            if path.endswith("/_stats") and isinstance(server, BatchServer):
                self._json(200, server.stats())
            elif path.endswith("/batches"):
                with server._batch_lock:
                    data = [b.as_json() for b in reversed(list(server.batches.values()))]
                self._json(200, {"object": "list", "data": data, "first_id": None, "last_id": None, "has_more": False})
            elif path.endswith("/results") and parts[-3] == "batches":
                query = dict(item.split("=", 1) for item in self.path.partition("?")[2].split("&") if "=" in item)
                self._json(*server.results_page(parts[-2], query.get("cursor")))
            elif len(parts) >= 2 and parts[-2] == "batches":
                wait = server.throttled()
                if wait is not None:
                    self._send(429, json.dumps({"error": {"message": "rate limited"}}), {"Retry-After": wait})
                else:
                    self._json(*server.poll(parts[-1]))
            elif path.endswith("/content") and parts[-3] == "files":
                stored = server.files.get(parts[-2])
                if stored is None:
                    self._json(404, {"error": {"message": f"No such File object: {parts[-2]}"}})
                else:
                    self._send(200, "", content_type="application/octet-stream", raw=stored[1])
            elif len(parts) >= 2 and parts[-2] == "files":
                found = server.file_objects.get(parts[-1])
                if found is None:
                    self._json(404, {"error": {"message": f"No such File object: {parts[-1]}"}})
                else:
                    self._json(200, found)
            else:
                super().do_GET()

        def do_POST(self) -> None:  # noqa: N802 (http.server naming)
            path = self.path.split("?")[0].rstrip("/")
            if not path.endswith(("/files", "/batches", "/cancel", "/_control")):
                super().do_POST()
                return
            data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if path.endswith("/files"):
                fields = _multipart(self.headers.get("Content-Type", ""), data)
                purpose = (fields.get("purpose") or (b"", None))[0].decode()
                if purpose != "batch" or "file" not in fields:
                    self._json(400, {"error": {"message": "purpose must be batch and a file is required"}})
                else:
                    content, filename = fields["file"]
                    self._json(200, server.upload(purpose, content, filename or "input.jsonl"))
            elif path.endswith("/batches"):
                try:
                    request = json.loads(data or b"{}")
                except ValueError:
                    self._json(400, {"error": {"message": "invalid JSON"}})
                    return
                self._json(*server.create(request))
            elif path.endswith("/cancel"):
                self._json(*server.cancel(path.split("/")[-2]))
            else:
                control = json.loads(data or b"{}")
                if "hold" in control:
                    server.hold() if control["hold"] else server.release()
                self._json(200, {"held": server._held})

    return Handler


def main() -> None:
    """Serve until stdin closes: ``python -m tests.helpers.batch_server --polls-to-complete 2``."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(description="loopback OpenAI Batch API server")
    parser.add_argument("--polls-to-complete", type=int, default=2)
    parser.add_argument("--hold", action="store_true", help="start held: batches stay in progress")
    parser.add_argument("--answer", default="tests.helpers.openai_server:quoted_words_answer", help="module:rule")
    args = parser.parse_args()
    import importlib

    module, _, name = args.answer.partition(":")
    rule = getattr(importlib.import_module(module), name)
    with BatchServer(answer=rule, polls_to_complete=args.polls_to_complete) as server:
        if args.hold:
            server.hold()
        print(server.base_url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
