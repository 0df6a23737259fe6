"""The side-by-side view in headless Chromium: choose A and B (or a shift), apply each filter, count the rows.

The pages are written by :func:`src.report.browser.write_instance_pages` from rows scored by the project's
scorer (:func:`src.scoring.evaluate.evaluate_dataset`): three configurations on a base set of 40
sentences and on a shifted set that keeps the base ids (one instance dropped, as ``adv_p`` drops a
rejected paraphrase). Each configuration's answer on each instance is drawn with a seed from four
answers of known instance LCS F1 (the gold spans: 1; a boundary mismatch: 2/3; a wrong span: 0; nothing: 0),
plus a sentence without gold. The expected rows of every filter are computed here from the predictions
(each instance's F1 from :func:`src.scoring.metrics.score_instance`, checked against the F1 the answer
was drawn for), never read from the page. A probe added to the served copy sets the page's controls as a
user does (``input`` events) and records what is drawn; ``--dump-dom`` prints it.
"""

from __future__ import annotations

import html
import json
import random
import re

import pytest

from src.report.browser import compare_href, write_instance_pages
from src.report.side_by_side import compare_pages
from src.scoring.evaluate import InstanceOutput, evaluate_dataset
from src.scoring.metrics import score_instance
from tests.helpers.chromium import ERROR_HOOK, chromium, require_chromium, serve_folder
from tests.helpers.records import make_record

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

TASK, BASE, SHIFT = "timex", "base", "adv"
CONFIGS = ("A", "B", "C")
INSTANCES = 40
DROPPED = "s38"  # not in the shifted set
EMPTY = "s39"  # no gold span
#: Answer kind -> (predictions, the instance LCS F1 they score on a sentence whose gold is Monday, Friday).
ANSWERS = {
    "right": (["Monday", "Friday"], 1.0),
    "boundary": (["met on Monday", "Friday"], 2 / 3),  # 2 (1/3 + 1) / (2 + 2)
    "wrong": (["Case"], 0.0),
    "nothing": ([], 0.0),
}
FILTERS = ("", "a_right_b_wrong", "a_wrong_b_right", "both_wrong", "both_right", "changed")


def records(dataset: str) -> list:
    words = "we met on Monday and left on Friday." if dataset == BASE else "we met on Monday, then left on Friday."
    out = []
    for k in range(INSTANCES):
        key = f"s{k}"
        if dataset == SHIFT and key == DROPPED:
            continue
        if key == EMPTY:
            out.append(make_record(key, f"Case {k}: nothing happened{'' if dataset == BASE else ' then'}.", []))
        else:
            out.append(make_record(key, f"Case {k}: {words}", ["Monday", "Friday"]))
    return out


def answers(config: str, dataset: str, recs: list) -> list[tuple[str, list]]:
    """(kind, predictions) per record, drawn with a seed per configuration and set."""
    rng = random.Random(f"{config}/{dataset}")
    out = []
    for record in recs:
        if record.id == EMPTY:
            out.append(("empty-wrong", ["Case"]) if config == "C" else ("empty-right", []))
        else:
            kind = rng.choice(sorted(ANSWERS))
            out.append((kind, list(ANSWERS[kind][0])))
    return out


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The pages, and per (config, dataset) each instance's F1 by id (the oracle)."""
    texts, rows, f1 = {}, {}, {}
    for dataset in (BASE, SHIFT):
        recs = records(dataset)
        texts[TASK, dataset] = {r.id: r.text for r in recs}
        for config in CONFIGS:
            drawn = answers(config, dataset, recs)
            outputs = [InstanceOutput(preds, raw=json.dumps(preds)) for _, preds in drawn]
            rows[config, TASK, dataset] = evaluate_dataset(TASK, dataset, recs, outputs, 10, 0).rows
            scores = {}
            for record, (kind, preds) in zip(recs, drawn):
                scored = score_instance(record.text, record.spans, preds)
                total = scored.n_pred + scored.n_gold
                scores[record.id] = None if total == 0 else 2 * scored.lcs / total
                if kind == "empty-right":  # nothing to find, nothing found
                    assert scores[record.id] is None
                else:  # the F1 the answer was drawn for (a wrong span on the empty sentence: 0)
                    assert scores[record.id] == pytest.approx(0.0 if kind == "empty-wrong" else ANSWERS[kind][1])
            f1[config, dataset] = scores
    out = tmp_path_factory.mktemp("reports")
    write_instance_pages(out / "instances", texts, rows)
    return out, f1


def expected(f1, a: str, b: str, shift: str | None, threshold: float) -> dict[str, list[str]]:
    """Filter -> the ids it shows, in the base set's order, computed from the oracle's F1."""
    first, second = f1[a, BASE], f1[b if shift is None else a, shift or BASE]

    def right(value):
        return value is None or value >= threshold - 1e-9

    out: dict[str, list[str]] = {name: [] for name in FILTERS}
    for key, fa in first.items():
        if key not in second:
            continue
        fb = second[key]
        ra, rb = right(fa), right(fb)
        tags = {
            "": True,
            "a_right_b_wrong": ra and not rb,
            "a_wrong_b_right": rb and not ra,
            "both_wrong": not ra and not rb,
            "both_right": ra and rb,
            "changed": (fa is None) != (fb is None) or (fa is not None and abs(fa - fb) > 1e-6),
        }
        for name, on in tags.items():
            if on:
                out[name].append(key)
    return out


PROBE_ID = "tempgen-compare"
# After load: sets the controls of each scenario in turn (as a user's choice does: value + input event)
# and records what the page shows.
PROBE = """<script>
window.addEventListener("load", function () {
  setTimeout(function () {
    var el = function (id) { return document.getElementById(id); };
    var all = function (sel) { return Array.prototype.slice.call(document.querySelectorAll(sel)); };
    function state() {
      var counts = {};
      all("[data-count]").forEach(function (b) { counts[b.dataset.count] = Number(b.textContent); });
      return {a: el("a").value, b: el("b").value, b_disabled: el("b").disabled, shift: el("shift").value,
              filter: el("filter").value, right: el("right").value, hash: location.hash, pos: el("pos").textContent,
              ids: all(".pair").map(function (d) { return d.dataset.id; }), counts: counts,
              sides: all(".pair .side").length, marked: all(".pair .txt span").length,
              labels: all("#filter option").map(function (o) { return o.textContent; })};
    }
    var out = {errors: window.__errors, initial: state(), scenarios: []};
    SCENARIOS.forEach(function (s) {
      ["shift", "a", "b", "right", "filter"].forEach(function (k) {
        if (k in s) { el(k).value = s[k]; el(k).dispatchEvent(new Event("input")); }
      });
      out.scenarios.push(state());
    });
    var pre = document.createElement("pre");
    pre.id = "PROBE_ID"; pre.style.display = "none"; pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  }, 100);
});
</script>""".replace("PROBE_ID", PROBE_ID)


@pytest.fixture(scope="module")
def served(study):
    out, _ = study
    scenarios: dict[str, list[dict]] = {}

    def rewrite(path_query: str, file):
        if "probe=" not in path_query:
            return None
        name = re.search(r"probe=(\w+)", path_query).group(1)
        page = file.read_text(encoding="utf-8").replace("<head>", "<head>" + ERROR_HOOK, 1)
        probe = PROBE.replace("SCENARIOS", json.dumps(scenarios.get(name, [])))
        return page.replace("</body>", probe + "</body>")

    with serve_folder(out, rewrite) as (base, requests):
        yield base, scenarios, requests


def probe(tmp_path, url: str) -> dict:
    done = chromium(tmp_path, "--window-size=1280,800", "--virtual-time-budget=10000", "--dump-dom", url)
    assert done.returncode == 0, done.stderr[-3000:]
    match = re.search(rf'<pre id="{PROBE_ID}"[^>]*>(.*?)</pre>', done.stdout, re.S)
    assert match, "the probe did not run:\n" + done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(html.unescape(match.group(1)))
    assert result["errors"] == [], result["errors"]
    return result


@pytest.fixture
def chromium_present():
    require_chromium()


def test_the_side_by_side_pages_and_their_manifest(study):
    out, _ = study
    pages = compare_pages(out / "instances")
    assert pages == {
        "compare_timex_base.html": {"configs": list(CONFIGS), "shifts": {SHIFT: list(CONFIGS)}},
        "compare_timex_adv.html": {"configs": list(CONFIGS), "shifts": {}},
    }


@pytest.mark.usefixtures("chromium_present")
def test_choosing_a_and_b_and_each_filter_shows_the_rows_the_scores_say(study, served, tmp_path):
    out, f1 = study
    base, scenarios, _ = served
    typed = {("A", "B", 1.0): "1", ("B", "C", 1.0): "", ("C", "A", 0.6): "0.6"}  # an emptied field means 1
    runs = list(typed)
    wanted = []
    for a, b, threshold in runs:
        for name in FILTERS:
            scenarios.setdefault("pairs", []).append(
                {"shift": "", "a": a, "b": b, "right": typed[a, b, threshold], "filter": name}
            )
            wanted.append((a, b, threshold, name))
    result = probe(tmp_path, base + "instances/compare_timex_base.html?probe=pairs")
    initial = result["initial"]  # no fragment: A is the first configuration, B the next, every instance shown
    assert (initial["a"], initial["b"], initial["shift"], initial["filter"]) == ("A", "B", "", "")
    assert initial["ids"] == [f"s{k}" for k in range(INSTANCES)] and initial["sides"] == 2 * INSTANCES
    assert initial["marked"] >= 2 * 2 * (INSTANCES - 1)  # each side underlines its two gold spans at least
    for (a, b, threshold, name), shown in zip(wanted, result["scenarios"], strict=True):
        rows = expected(f1, a, b, None, threshold)
        assert (shown["a"], shown["b"], shown["filter"]) == (a, b, name)
        assert shown["ids"] == rows[name], (a, b, threshold, name)
        assert shown["counts"] == {k: len(v) for k, v in rows.items() if k}, (a, b, threshold)
        assert f"({len(rows[name])} shown)" in shown["pos"]
        assert f"a={a}&b={b}" in shown["hash"] and (f"filter={name}" in shown["hash"]) == bool(name)
    # the filters split the instances: right/wrong cells add up, and the data bites (no filter is empty everywhere)
    for a, b, threshold in runs:
        rows = expected(f1, a, b, None, threshold)
        parts = ("a_right_b_wrong", "a_wrong_b_right", "both_wrong", "both_right")
        assert sum(len(rows[k]) for k in parts) == INSTANCES
    assert all(any(expected(f1, a, b, None, t)[name] for a, b, t in runs) for name in FILTERS)


@pytest.mark.usefixtures("chromium_present")
def test_base_against_its_shift_pairs_instances_by_id_and_shows_what_the_shift_changed(study, served, tmp_path):
    _, f1 = study
    base, scenarios, _ = served
    for config in ("A", "C"):
        for name in FILTERS:
            scenarios.setdefault("shift", []).append({"shift": SHIFT, "a": config, "filter": name})
    result = probe(tmp_path, base + "instances/compare_timex_base.html?probe=shift")
    for k, shown in enumerate(result["scenarios"]):
        config, name = ("A", "C")[k // len(FILTERS)], FILTERS[k % len(FILTERS)]
        rows = expected(f1, config, config, SHIFT, 1.0)
        assert (shown["a"], shown["b"], shown["b_disabled"], shown["shift"]) == (config, config, True, SHIFT)
        assert shown["ids"] == rows[name], (config, name)
        assert DROPPED not in shown["ids"] and len(rows[""]) == INSTANCES - 1
        assert shown["counts"] == {key: len(v) for key, v in rows.items() if key}
        assert f"shift={SHIFT}" in shown["hash"] and "b=" not in shown["hash"]
        assert "changed by the shift" in shown["labels"]
    assert expected(f1, "A", "A", SHIFT, 1.0)["changed"] and expected(f1, "C", "C", SHIFT, 1.0)["a_right_b_wrong"]


@pytest.mark.usefixtures("chromium_present")
def test_a_link_from_the_report_opens_the_view_it_names(study, served, tmp_path):
    """``compare_href`` (what the report's comparison and robustness tables link) selects A, B or the shift."""
    _, f1 = study
    base, _, requests = served
    pair = compare_href(TASK, BASE, "C", "A") + "&filter=a_right_b_wrong&right=0.6"
    page, fragment = pair.split("#")
    shown = probe(tmp_path, f"{base}{page}?probe=none#{fragment}")["initial"]
    assert (shown["a"], shown["b"], shown["shift"], shown["filter"], shown["right"]) == (
        "C",
        "A",
        "",
        "a_right_b_wrong",
        "0.6",
    )
    assert shown["ids"] == expected(f1, "C", "A", None, 0.6)["a_right_b_wrong"]

    shifted = compare_href(TASK, BASE, "B", shift=SHIFT) + "&filter=changed"
    page, fragment = shifted.split("#")
    shown = probe(tmp_path, f"{base}{page}?probe=none#{fragment}")["initial"]
    assert (shown["a"], shown["shift"], shown["b_disabled"], shown["filter"]) == ("B", SHIFT, True, "changed")
    assert shown["ids"] == expected(f1, "B", "B", SHIFT, 1.0)["changed"]
    failed = [(path, status) for path, status in requests if status >= 400 and path != "/favicon.ico"]
    assert not failed, failed
