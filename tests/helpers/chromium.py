"""Headless Chromium over a loopback HTTP server, for the tests that open the report's pages in a browser.

Chromium is Debian's ``chromium`` (``$CHROMIUM`` overrides the path; ``.ci/run`` installs it). Where it
is missing the browser tests skip, except in CI (``CI=true``), where that is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--mute-audio",
]

#: Installed first in a served page's ``<head>``: records every uncaught error and rejected promise
#: in ``window.__errors`` (a probe reports it).
ERROR_HOOK = """<script>
window.__errors = [];
window.addEventListener("error", function (e) { window.__errors.push(String(e.message)); });
window.addEventListener("unhandledrejection", function (e) { window.__errors.push(String(e.reason)); });
</script>"""


def require_chromium() -> None:
    """Skip without Chromium; fail in CI, which must check the pages in a browser."""
    if CHROMIUM is None:
        message = "headless Chromium not found (apt-get install chromium, or set $CHROMIUM)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}: CI must check the report in a browser")
        pytest.skip(f"{message}: report not checked in a browser")


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """Run headless Chromium with its own profile under ``tmp_path`` (``--dump-dom``, ``--screenshot``...)."""
    profile = tmp_path / "chromium-profile"
    profile.mkdir(exist_ok=True)
    command = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


#: ``rewrite(path with query, file path) -> page text or None``: a served HTML page, changed for a probe.
Rewrite = Callable[[str, Path], "str | None"]


@contextmanager
def serve_folder(root: Path, rewrite: Rewrite | None = None) -> Iterator[tuple[str, list[tuple[str, int]]]]:
    """An HTTP server on 127.0.0.1 for ``root``: (base URL, the (path, status) of every request).

    An ``.html`` request for which ``rewrite`` returns text is answered with that text (a probe added to
    the served copy only); everything else is served from the folder as it is.
    """
    requests: list[tuple[str, int]] = []

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, format, *args):  # quiet
            pass

        def log_request(self, code="-", size="-"):
            requests.append((self.path, int(getattr(code, "value", code))))

        def do_GET(self):  # noqa: N802
            path = urlsplit(self.path).path
            page = rewrite(self.path, root / path.lstrip("/")) if rewrite and path.endswith(".html") else None
            if page is None:
                super().do_GET()
                return
            body = page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", requests
    finally:
        server.shutdown()
        server.server_close()
