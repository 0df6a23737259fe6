"""The HTML report renders in a real browser: headless Chromium, loopback HTTP only.

The report is written by the project's own analysis (``src.analyze.main``) from the small
MLflow study of ``tests/report/test_loading.py``, served with ``http.server`` on 127.0.0.1
and opened by Chromium (Debian's ``chromium``; ``$CHROMIUM`` overrides the path):

- with ``--dump-dom``, a probe script (added to the served copy only) records, after the
  page's load event, every ``<img>`` with its ``naturalWidth``, the number of ``<table>``
  elements and every link: each image must have loaded (naturalWidth > 0);
- every local ``src``/``href`` of the report answers 200 over HTTP with the right content
  (PNG signature, ``<svg``, a non-empty CSV), and no request the browser made failed;
- with ``--screenshot``, a PNG of the page is written and is not blank;
- the headline: no JavaScript error on the report or on an instance page (a hook injected at the
  top of ``<head>`` records ``window.onerror``), the heatmap and the first finding start above the
  fold at 1280x800, and a heatmap cell's link opens its instance page filtered to that configuration
  (screenshots of both first screens are kept under the test's ``tmp_path``);
- every side-by-side link of the report names a view its page holds (the view itself is driven in
  ``tests/scale/test_side_by_side_browser.py``).

The browser and the server are ``tests/helpers/chromium.py``'s. The instance pages are written with :func:`src.report.browser.write_instance_pages` from rows
scored like the study's runs, before the report, so the heatmap links to them. Skipped where
Chromium is not installed (``apt-get install chromium``; ``.ci/run`` installs it), except in CI
(``CI=true``), where a missing Chromium is a failure.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest

from tests.helpers.chromium import ERROR_HOOK, chromium, require_chromium, serve_folder

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

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

HEADLINE_ID = "tempgen-headline"
# After load: errors, where the heatmap and the first finding start, and the instance page's filter state.
HEADLINE_PROBE = """<script>
window.addEventListener("load", function () {
  setTimeout(function () {
    var top = function (el) { return el ? el.getBoundingClientRect().top + window.scrollY : null; };
    var findings = document.getElementById("findings");
    var first = findings ? findings.nextElementSibling : null;
    while (first && first.tagName !== "OL") { first = first.nextElementSibling; }
    var config = document.getElementById("config");
    var out = document.createElement("pre");
    out.id = "HEADLINE_ID"; out.style.display = "none";
    out.textContent = JSON.stringify({
      errors: window.__errors, height: window.innerHeight, width: window.innerWidth,
      heatmap: top(document.getElementById("heatmap")),
      finding: first && first.querySelector("li") ? top(first.querySelector("li")) : null,
      selected: config ? config.value : null,
      shown: Array.prototype.map.call(document.querySelectorAll(".cfg"), function (d) { return d.dataset.config; }),
      instances: document.querySelectorAll(".inst").length,
      marked: document.querySelectorAll(".txt span").length
    });
    document.body.appendChild(out);
  }, 200);
});
</script>""".replace("HEADLINE_ID", HEADLINE_ID)


@pytest.fixture
def chromium_present():
    require_chromium()


needs_chromium = pytest.mark.usefixtures("chromium_present")


def study_rows():
    """Texts and per-instance rows of the study's prompted configurations, scored as ``src.run`` scores them."""
    from src.scoring.evaluate import evaluate_dataset
    from tests.helpers.mlflow_study import DATASETS, QUALITY, outputs_for, study_records

    texts, rows = {}, {}
    for task, dataset in DATASETS:
        records = study_records(task, dataset)
        texts[task, dataset] = {r.id: r.text for r in records}
        for (model, strategy), quality in QUALITY.items():
            outputs = outputs_for(records, task, quality, dataset)
            rows[f"{model}-{strategy}", task, dataset] = evaluate_dataset(task, dataset, records, outputs, 10, 0).rows
    return texts, rows


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
    from src.report.browser import write_instance_pages

    texts, rows = study_rows()
    assert len(write_instance_pages(out / "instances", texts, rows)) == 5  # before the report: the heatmap links them
    args = ["--experiment", EXPERIMENT, "--tracking-uri", uri, "--out", str(out), "--resamples", "200", "--seed", "3"]
    if getattr(store, "summaries", None) is not None:  # the study is the runs its summaries name
        args += ["--summaries", str(store.summaries)]
    assert main(args) == 0
    assert (out / "report.html").exists()
    # the analysis wrote the pages with this machine's dataset texts, which are not the study's
    # synthetic instances: the same pages again, with the study's texts
    write_instance_pages(out / "instances", texts, rows)
    return out


@pytest.fixture(scope="module")
def served(report_dir):
    """An HTTP server on 127.0.0.1 for the report folder; records (path, status) of every request."""

    def rewrite(path_query: str, file: Path) -> str | None:
        path = urlsplit(path_query).path
        if "headline=1" in path_query:
            page = file.read_text(encoding="utf-8")
            return page.replace("<head>", "<head>" + ERROR_HOOK, 1).replace("</body>", HEADLINE_PROBE + "</body>")
        if path == "/report.html" and "probe=1" in path_query:
            page = file.read_text(encoding="utf-8")
            return page.replace("</body>", PROBE + "</body>") if "</body>" in page else page + PROBE
        return None

    with serve_folder(report_dir, rewrite) as (base, requests):
        yield base, requests


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


def test_every_side_by_side_link_of_the_report_names_a_view_its_page_holds(report_dir):
    """The comparison and robustness tables link ``compare_href`` views: each page exists and holds A, B or the shift."""
    from urllib.parse import parse_qs

    from src.report.side_by_side import compare_pages

    source = (report_dir / "report.html").read_text(encoding="utf-8")
    links = re.findall(r'href="instances/(compare_[^"#]+)#([^"]+)"', source)
    # This study links few or none (one fine-tuned configuration; its adv_p ids are not its base ids),
    # so each link found is checked; the view itself is tested in test_side_by_side_browser.py.
    pages = compare_pages(report_dir / "instances")
    assert pages, "the analysis wrote no side-by-side page"
    for name, fragment in links:
        view = {key: values[0] for key, values in parse_qs(html.unescape(fragment)).items()}
        entry = pages[name]
        if "shift" in view:
            assert view["a"] in entry["shifts"][view["shift"]], (name, view)
        else:
            assert view["a"] in entry["configs"] and view.get("b", view["a"]) in entry["configs"], (name, view)


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


def headline_probe(tmp_path: Path, url: str) -> dict:
    done = chromium(tmp_path, "--window-size=1280,800", "--virtual-time-budget=10000", "--dump-dom", url)
    assert done.returncode == 0, done.stderr[-3000:]
    match = re.search(rf'<pre id="{HEADLINE_ID}"[^>]*>(.*?)</pre>', done.stdout, re.S)
    assert match, "the probe did not run:\n" + done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(html.unescape(match.group(1)))


def screenshot(tmp_path: Path, url: str, name: str) -> Path:
    from PIL import Image

    shot = tmp_path / name
    done = chromium(tmp_path, "--window-size=1280,800", "--virtual-time-budget=10000", f"--screenshot={shot}", url)
    assert done.returncode == 0 and shot.exists(), done.stderr[-3000:]
    with Image.open(shot) as image:
        assert image.size == (1280, 800)
        histogram = image.convert("L").histogram()
    assert sum(histogram[:250]) / sum(histogram) > 0.02  # not a blank page
    return shot


@needs_chromium
def test_the_headline_is_above_the_fold_and_a_cell_opens_its_filtered_instance_page(report_dir, served, tmp_path):
    base, _ = served
    report = headline_probe(tmp_path, base + "report.html?headline=1")
    assert report["errors"] == [], report["errors"]
    assert report["width"] == 1280  # --dump-dom's viewport is 1280 x ~660: the 800 px fold is checked on page offsets
    assert report["heatmap"] is not None and report["heatmap"] < 800, report
    assert report["finding"] is not None and report["finding"] < 800, report
    screenshot(tmp_path, base + "report.html", "report-first-screen.png")

    source = (report_dir / "report.html").read_text(encoding="utf-8")
    heatmap = source[source.index('<table class="heatmap"') : source.index("</table>", source.index("heatmap"))]
    links = re.findall(r'<a href="(instances/[^"#]+)#config=([^"]+)">', heatmap)
    assert len(links) == 6 * 5 + 3  # every cell links to its page: six prompted on five sets, the fine-tuned on three
    page, config = next((p, c) for p, c in links if c == "small-D" and p.endswith("timex_t2c.html"))
    instance = headline_probe(tmp_path, f"{base}{page}?headline=1#config={config}")
    assert instance["errors"] == [], instance["errors"]
    assert instance["selected"] == "small-D" and set(instance["shown"]) == {"small-D"}
    assert instance["instances"] == 20 and instance["marked"] >= 40  # gold and predicted spans highlighted
    everything = headline_probe(tmp_path, f"{base}{page}?headline=1")
    assert everything["selected"] == "" and len(set(everything["shown"])) == 6
    screenshot(tmp_path, f"{base}{page}#config={config}", "instance-page.png")
    assert (tmp_path / "report-first-screen.png").exists() and (tmp_path / "instance-page.png").exists()


@pytest.fixture(scope="module")
def mlflow_ui(tmp_path_factory):
    """``mlflow server`` on 127.0.0.1 over the small study, its configuration runs nested under a
    ``profile smoke`` parent as the pipeline nests them (src/tracking/run_tree.py)."""
    import socket
    import sys
    import time

    import mlflow

    from src.tracking.run_tree import PARENT_TAG, profile_parent
    from tests.helpers.mlflow_study import EXPERIMENT, log_study

    store = log_study(tmp_path_factory.mktemp("ui-store"))
    client = mlflow.MlflowClient(store.uri)
    experiment_id = client.get_experiment_by_name(EXPERIMENT).experiment_id
    parent = profile_parent(client, experiment_id, "smoke")
    for run_id in store.ids.values():
        client.set_tag(run_id, PARENT_TAG, parent)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = tmp_path_factory.mktemp("ui-log") / "server.log"
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", store.uri]
    command += ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    with log.open("w") as sink:
        server = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=2).read()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.5)
        yield url, experiment_id, store.ids
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


def mlflow_page(tmp_path: Path, url: str, name: str) -> str:
    """The rendered DOM of an MLflow UI page (a React app: given time to fetch and render), and a screenshot."""
    done = chromium(tmp_path, "--window-size=1280,800", "--virtual-time-budget=25000", "--dump-dom", url)
    assert done.returncode == 0, done.stderr[-3000:]
    shot = chromium(
        tmp_path, "--window-size=1280,800", "--virtual-time-budget=25000", f"--screenshot={tmp_path / name}", url
    )
    assert shot.returncode == 0 and (tmp_path / name).exists(), shot.stderr[-2000:]
    return done.stdout


@needs_chromium
def test_the_mlflow_ui_shows_the_nested_runs_a_comparison_and_the_artifacts(mlflow_ui, tmp_path):
    url, experiment_id, ids = mlflow_ui
    table = mlflow_page(
        tmp_path, f"{url}/#/experiments/{experiment_id}/runs?workflowType=machine_learning", "mlflow-runs.png"
    )
    assert "profile smoke" in table  # the parent run the configurations are nested under
    first, second = ids["small-D"], ids["large-I"]
    compare = mlflow_page(
        tmp_path,
        f'{url}/#/compare-runs?runs=["{first}","{second}"]&experiments=["{experiment_id}"]',
        "mlflow-compare.png",
    )
    assert "timex.base.f1" in compare and "small-D" in compare and "large-I" in compare
    artifacts = mlflow_page(
        tmp_path, f"{url}/#/experiments/{experiment_id}/runs/{first}/artifacts", "mlflow-artifacts.png"
    )
    assert "predictions" in artifacts and "bootstrap" in artifacts
