"""The HTML report renders in a real browser: headless Chromium, loopback HTTP only.

The report is written by the project's own analysis (``src.analyze.main``) from the small
MLflow study of ``tests/report/test_loading.py``, served with ``http.server`` on 127.0.0.1
and opened by Chromium (Debian's ``chromium``; ``$CHROMIUM`` overrides the path):

- with ``--dump-dom``, a probe script (added to the served copy only) records, after the
  page's load event, every ``<img>`` with its ``naturalWidth``, the number of ``<table>``
  elements and every link: each image must have loaded (naturalWidth > 0);
- every local ``src``/``href`` of the report answers 200 over HTTP with the right content
  (PNG signature, ``<svg``, a non-empty CSV), and no request the browser made failed;
- with ``--screenshot``, a PNG of the page is written and is not blank.

Skipped with a message where Chromium is not installed
(``apt-get install chromium``; ``.ci/run`` installs it when apt is available).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import threading
import urllib.request
from functools import partial
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest

pytestmark = pytest.mark.timeout(300)

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
PROBE_ID = "tempgen-probe"
# Runs after the load event (which waits for every image): the result goes into the DOM,
# which --dump-dom prints.
PROBE = """<script>
window.addEventListener("load", function () {
  var images = Array.prototype.map.call(document.images, function (img) {
    return {src: img.getAttribute("src"), complete: img.complete, width: img.naturalWidth};
  });
  var links = Array.prototype.map.call(document.querySelectorAll("a[href]"), function (a) {
    return a.getAttribute("href");
  });
  var out = document.createElement("pre");
  out.id = "PROBE_ID"; out.style.display = "none";
  out.textContent = JSON.stringify({images: images, links: links,
                                    tables: document.querySelectorAll("table").length});
  document.body.appendChild(out);
});
</script>""".replace("PROBE_ID", PROBE_ID)

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="headless Chromium not found (apt-get install chromium, or set $CHROMIUM): report not checked in a browser",
)


class _Links(HTMLParser):
    """Every src and href of a page."""

    def __init__(self):
        super().__init__()
        self.refs: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("src", "href") and value:
                self.refs.append((tag, value))


def is_local(ref: str) -> bool:
    parts = urlsplit(ref)
    return not parts.scheme and not parts.netloc and not ref.startswith("#")


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    """``report.html`` and its figures and tables, written by ``python -m src.analyze``'s main."""
    from src.analyze import main
    from tests.helpers.mlflow_study import EXPERIMENT, log_study

    store = log_study(tmp_path_factory.mktemp("store"))
    uri = store[0] if isinstance(store, tuple) and not hasattr(store, "uri") else store.uri
    out = tmp_path_factory.mktemp("reports")
    args = ["--experiment", EXPERIMENT, "--tracking-uri", uri, "--out", str(out), "--resamples", "200", "--seed", "3"]
    if getattr(store, "summaries", None) is not None:  # the study is the runs its summaries name
        args += ["--summaries", str(store.summaries)]
    assert main(args) == 0
    assert (out / "report.html").exists()
    return out


@pytest.fixture(scope="module")
def served(report_dir):
    """An HTTP server on 127.0.0.1 for the report folder; records (path, status) of every request."""
    requests: list[tuple[str, int]] = []

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, format, *args):  # quiet
            pass

        def log_request(self, code="-", size="-"):
            requests.append((self.path, int(getattr(code, "value", code))))

        def do_GET(self):  # noqa: N802
            if urlsplit(self.path).path == "/report.html" and "probe=1" in self.path:
                page = (report_dir / "report.html").read_text(encoding="utf-8")
                body = (page.replace("</body>", PROBE + "</body>") if "</body>" in page else page + PROBE).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            super().do_GET()

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(report_dir)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", requests
    finally:
        server.shutdown()
        server.server_close()


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "chromium-profile"
    profile.mkdir(exist_ok=True)
    command = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@needs_chromium
def test_every_image_loads_and_the_tables_render_in_chromium(report_dir, served, tmp_path):
    base, requests = served
    done = chromium(tmp_path, "--virtual-time-budget=10000", "--dump-dom", base + "report.html?probe=1")
    assert done.returncode == 0, done.stderr[-3000:]
    match = re.search(rf'<pre id="{PROBE_ID}"[^>]*>(.*?)</pre>', done.stdout, re.S)
    assert match, "the probe did not run (no load event?):\n" + done.stdout[-2000:] + done.stderr[-2000:]
    probe = json.loads(html.unescape(match.group(1)))

    source = (report_dir / "report.html").read_text(encoding="utf-8")
    expected_images = re.findall(r"<img\b", source)
    assert len(probe["images"]) == len(expected_images) >= 5
    broken = [img for img in probe["images"] if not (img["complete"] and img["width"] > 0)]
    assert not broken, f"images that did not load in the browser: {broken}"
    assert probe["tables"] == source.count("<table") >= 5
    # the browser fetched every image over HTTP and nothing it asked for failed
    fetched = {urlsplit(path).path.lstrip("/") for path, status in requests if status in (200, 304)}
    assert {img["src"] for img in probe["images"]} <= fetched
    failed = [(path, status) for path, status in requests if status >= 400 and path != "/favicon.ico"]
    assert not failed, failed


def test_every_local_link_and_image_resolves_over_http(report_dir, served):
    base, _ = served
    parser = _Links()
    parser.feed((report_dir / "report.html").read_text(encoding="utf-8"))
    local = sorted({ref for _, ref in parser.refs if is_local(ref)})
    assert any(ref.endswith(".png") for ref in local) and any(ref.endswith(".csv") for ref in local)
    for ref in local:
        with urllib.request.urlopen(urljoin(base + "report.html", ref), timeout=10) as response:
            assert response.status == 200, ref
            body = response.read()
        path = urlsplit(ref).path
        if path.endswith(".png"):
            assert body.startswith(b"\x89PNG\r\n\x1a\n") and len(body) > 1000, ref
        elif path.endswith(".svg"):
            assert b"<svg" in body[:2000], ref
        else:
            assert body.strip(), ref


@needs_chromium
def test_a_screenshot_of_the_report_is_not_blank(served, tmp_path):
    from PIL import Image

    base, _ = served
    shot = tmp_path / "report.png"
    done = chromium(
        tmp_path, "--window-size=1280,2400", "--virtual-time-budget=10000", f"--screenshot={shot}", base + "report.html"
    )
    assert done.returncode == 0 and shot.exists(), done.stderr[-3000:]
    with Image.open(shot) as image:
        assert image.format == "PNG" and image.size == (1280, 2400)
        gray = image.convert("L")
        histogram = gray.histogram()
    pixels = sum(histogram)
    non_white = sum(histogram[:250]) / pixels
    assert non_white > 0.02, f"only {non_white:.1%} of the screenshot is not white"
    assert sum(1 for count in histogram if count) > 20  # text, table borders and figures, not one flat colour
