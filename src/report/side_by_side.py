"""The side-by-side view: two configurations, or base and a shifted set, per instance next to each other.

A set-level F1 difference says that two configurations differ, not where. This page puts A's and
B's spans on every instance next to each other, each drawn on its own text with the gold spans
(the scorer's matching, :func:`src.report.static_page.classify`), and filters the instances:
"A right, B wrong", "A wrong, B right", "both wrong", "both right" and "changed".

- **Right** means the instance's LCS F1 (``2 matched / (n_pred + n_gold)``, the scorer's micro-F1 of
  one instance) is at least the page's threshold, 1 by default (every gold span found exactly and
  nothing else predicted); an instance with neither gold nor predicted spans is right (no error).
- **Changed** means A's and B's instance F1 differ. With a shift, B is A's configuration on the
  shifted set (``adv``, ``adv_p``, ``voc``: their instances keep their base instance's id), so
  "changed by the shift" lists every instance whose score the perturbation moved, and
  "A right, B wrong" the instances it broke.

One page per task/dataset, ``compare_<task>_<dataset>.html``; the base set's page also holds the
task's shifted sets. The URL fragment selects the view: ``#a=A&b=B`` or ``#a=A&shift=adv``, plus
``&filter=a_right_b_wrong|a_wrong_b_right|both_wrong|both_right|changed`` and ``&right=0.8``
(:func:`src.report.browser.compare_href` builds the first part). ``compare.json`` beside the pages
names what each page can show (:func:`compare_pages`), so the report links only to views that exist.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from src.report.static_page import embed_json, fill_page, read_manifest
from src.study import DERIVED_DATASETS

#: The set the shifted sets are built from (instance by instance, keeping its ids).
BASE = "base"
#: Page name -> {"configs": [...], "shifts": {shift: [configurations with results on base and on it]}}.
COMPARE_MANIFEST = "compare.json"
PAGE_SIZE = 50
#: The filters of the page, in its order (value -> label); "" shows every instance.
FILTERS = {
    "": "every instance",
    "a_right_b_wrong": "A right, B wrong",
    "a_wrong_b_right": "A wrong, B right",
    "both_wrong": "both wrong",
    "both_right": "both right",
    "changed": "changed (instance F1 differs)",  # shown as "changed by the shift" with a shift
}
#: What a configuration's result on an instance keeps on this page (the raw answer is on the instance page).
KEPT = ("gold", "preds", "counts", "f1", "parse_ok", "truncated")


def compare_page_name(task: str, dataset: str) -> str:
    """The file name of a task/dataset's side-by-side page (shifted sets are on their base set's page)."""
    return f"compare_{task}_{dataset}.html"


def _slim(instances: list[dict[str, Any]], configs: list[str]) -> list[dict[str, Any]]:
    """Instances of a browser page's data with only ``configs``' results, and only what this page draws."""
    out = []
    for inst in instances:
        by = {c: {key: inst["by"][c][key] for key in KEPT} for c in configs if c in inst["by"]}
        if by:
            out.append({key: inst[key] for key in ("id", "text", "text_missing", "gold")} | {"by": by})
    return out


def compare_data(task: str, dataset: str, pages: Mapping[tuple[str, str], Mapping[str, Any]]) -> dict[str, Any] | None:
    """The JSON a side-by-side page embeds, from the instance browser's page data (``pages``: (task,
    dataset) -> :func:`src.report.browser.page_data`); None when the page could compare nothing
    (one configuration and no shifted set)."""
    own = pages[task, dataset]
    configs = list(own["configs"])
    sets = {dataset: _slim(own["instances"], configs)}
    shifts: dict[str, list[str]] = {}
    if dataset == BASE:
        base_ids = {inst["id"] for inst in own["instances"]}
        for shift in DERIVED_DATASETS:
            shifted = pages.get((task, shift))
            if shifted is None or not base_ids & {inst["id"] for inst in shifted["instances"]}:
                continue
            shared = [c for c in configs if c in shifted["configs"]]
            if shared:
                shifts[shift] = shared
                sets[shift] = _slim(shifted["instances"], shared)
    if len(configs) < 2 and not shifts:
        return None
    return {"task": task, "dataset": dataset, "configs": configs, "shifts": shifts, "sets": sets}


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body{font-family:sans-serif;max-width:90rem;margin:1rem auto;padding:0 1rem;line-height:1.5}
.bar{position:sticky;top:0;background:#fff;padding:.4rem 0;border-bottom:1px solid #ccc;z-index:1}
.bar label{margin-right:1rem;font-size:.9rem}.pair{border-bottom:1px solid #ddd;padding:.5rem 0}
.pair h3{font-size:.9rem;margin:.2rem 0;color:#555}.cols{display:grid;grid-template-columns:1fr 1fr;gap:1rem}
.name{font-size:.8rem;color:#333;font-weight:bold}.right{color:#2a9d4b}.wrong{color:#d1495b}
__SPAN_CSS__
.legend span{margin-right:1rem;padding:0 .3rem}.small{font-size:.8rem;color:#555}.flag{color:#d1495b;font-size:.8rem}
#counts{font-size:.85rem;margin:.3rem 0}
</style></head><body>
<h1>__TITLE__</h1>
<p class="legend"><b>Legend</b>: gold spans underlined, predicted spans shaded, by match class
(the scorer's word-LCS matching): <span class="g-exact p-exact">exact</span>
<span class="g-boundary p-boundary">boundary mismatch</span> <span class="g-missing">missing (gold, not found)</span>
<span class="p-spurious">spurious (predicted, no gold)</span>. <b>Right</b>: the instance's LCS F1
(2 matched / (predicted + gold spans)) is at least the threshold; no gold and no prediction is right.
<b>Changed</b>: A's and B's instance F1 differ (with a shift: the perturbation moved the score).</p>
<div class="bar">
<label>A <select id="a"></select></label>
<label>B <select id="b"></select></label>
<label>or shift <select id="shift"><option value="">none (B is a configuration)</option></select></label>
<label>show <select id="filter"></select></label>
<label>right: F1 &ge; <input id="right" type="number" min="0" max="1" step="0.05" value="1"></label>
<button id="prev">&larr;</button> <span id="pos" class="small"></span> <button id="next">&rarr;</button>
<div id="counts"></div>
</div>
__SCRIPT_HEAD__
  var FILTERS = __FILTERS__, PAGE_SIZE = __PAGE_SIZE__, page = 0;
  function options(select, values, labels) {
    select.innerHTML = values.map(function (v, i) {
      return '<option value="' + esc(v) + '">' + esc(labels ? labels[i] : v) + "</option>";
    }).join("");
  }
  Object.keys(DATA.shifts).forEach(function (s) {
    var o = document.createElement("option"); o.value = s; o.textContent = s; el("shift").appendChild(o);
  });
  options(el("filter"), Object.keys(FILTERS), Object.keys(FILTERS).map(function (k) { return FILTERS[k]; }));
  var byId = {};
  Object.keys(DATA.sets).forEach(function (name) {
    byId[name] = {};
    DATA.sets[name].forEach(function (inst) { byId[name][inst.id] = inst; });
  });
  function param(name) {
    var m = new RegExp("(?:^#|&)" + name + "=([^&]*)").exec(location.hash);
    return m ? decodeURIComponent(m[1]) : null;
  }
  function fromHash() {
    var shift = param("shift"), a = param("a"), b = param("b"), f = param("filter"), r = parseFloat(param("right"));
    el("shift").value = shift && DATA.shifts[shift] ? shift : (DATA.configs.length < 2 ? Object.keys(DATA.shifts)[0] : "");
    var choices = el("shift").value ? DATA.shifts[el("shift").value] : DATA.configs;
    options(el("a"), choices);
    el("a").value = choices.indexOf(a) >= 0 ? a : choices[0];
    fillB(b);
    el("filter").value = f && FILTERS.hasOwnProperty(f) ? f : "";
    el("right").value = r >= 0 && r <= 1 ? String(r) : "1";
    page = 0;
  }
  function fillB(wanted) {
    var a = el("a").value, others = DATA.configs.filter(function (c) { return c !== a; });
    if (el("shift").value) { options(el("b"), [a], [a + " on " + el("shift").value]); el("b").disabled = true; return; }
    options(el("b"), others); el("b").disabled = false;
    el("b").value = others.indexOf(wanted) >= 0 ? wanted : others[0];
  }
  function toHash() {
    var parts = ["a=" + encodeURIComponent(el("a").value)];
    if (el("shift").value) parts.push("shift=" + encodeURIComponent(el("shift").value));
    else parts.push("b=" + encodeURIComponent(el("b").value));
    if (el("filter").value) parts.push("filter=" + el("filter").value);
    if (el("right").value !== "1") parts.push("right=" + encodeURIComponent(el("right").value));
    history.replaceState(null, "", "#" + parts.join("&"));
  }
  function isRight(r, threshold) { return r.f1 === null || r.f1 >= threshold - 1e-9; }
  function rightLimit() { var t = parseFloat(el("right").value); return t >= 0 ? t : 1; }
  function pairs() {
    var a = el("a").value, shift = el("shift").value, b = shift ? a : el("b").value;
    var limit = rightLimit(), other = byId[shift || DATA.dataset];
    var out = [];
    DATA.sets[DATA.dataset].forEach(function (inst) {
      var twin = other[inst.id], ra = inst.by[a], rb = twin && twin.by[b];
      if (!ra || !rb) return;
      var ar = isRight(ra, limit), br = isRight(rb, limit);
      out.push({id: inst.id, a: inst, b: twin, ra: ra, rb: rb, tags: {
        "": true, a_right_b_wrong: ar && !br, a_wrong_b_right: !ar && br, both_wrong: !ar && !br,
        both_right: ar && br, changed: ra.f1 !== rb.f1}});
    });
    return out;
  }
  function side(label, inst, r, threshold) {
    var away = r.preds.filter(function (p) { return p.start == null; }).map(function (p) {
      return '<span class="p-' + p.cls + '">' + esc(p.text) + "</span>";
    });
    var ok = isRight(r, threshold);
    return '<div class="side"><div class="name">' + esc(label) + ' &middot; <span class="' + (ok ? "right" : "wrong") +
      '">F1 ' + (r.f1 === null ? "&ndash; (no spans)" : r.f1.toFixed(3)) + (ok ? " right" : " wrong") + "</span></div>" +
      '<div class="txt">' + (inst.text_missing ? '<span class="small">(text not available)</span>' : marked(inst, r)) +
      '</div><div class="small">gold: ' + (inst.gold.map(function (g, j) {
        return '<span class="g-' + r.gold[j] + '">' + esc(g.text) + "</span>";
      }).join(" &middot; ") || "none") + (away.length ? "; not in text: " + away.join(", ") : "") +
      "; exact " + r.counts.exact + ", boundary " + r.counts.boundary + ", missing " + r.counts.missing +
      ", spurious " + r.counts.spurious + (r.parse_ok ? "" : ' <span class="flag">parse failure</span>') +
      (r.truncated ? ' <span class="flag">truncated</span>' : "") + "</div></div>";
  }
  function label(k) {
    return k === "changed" ? (el("shift").value ? "changed by the shift" : "A and B score differently") : FILTERS[k];
  }
  function render() {
    Array.prototype.forEach.call(el("filter").options, function (o) { o.textContent = label(o.value); });
    var all = pairs(), kind = el("filter").value, rows = all.filter(function (p) { return p.tags[kind]; });
    var shift = el("shift").value, a = el("a").value, b = shift ? a : el("b").value;
    var limit = rightLimit(), pages = Math.max(1, Math.ceil(rows.length / PAGE_SIZE));
    page = Math.min(page, pages - 1);
    el("counts").innerHTML = "Of " + all.length + " instances with both results: " +
      Object.keys(FILTERS).filter(function (k) { return k; }).map(function (k) {
        var n = all.filter(function (p) { return p.tags[k]; }).length;
        return label(k) + ' <b data-count="' + k + '">' + n + "</b>";
      }).join(" &middot; ");
    el("pos").textContent = "page " + (page + 1) + " of " + pages + " (" + rows.length + " shown)";
    var labelA = "A: " + a + (shift ? " on " + DATA.dataset : ""), labelB = "B: " + b + (shift ? " on " + shift : "");
    el("list").innerHTML = rows.slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE).map(function (p) {
      return '<div class="pair" data-id="' + esc(p.id) + '"><h3>' + esc(p.id) + "</h3><div class=\\"cols\\">" +
        side(labelA, p.a, p.ra, limit) + side(labelB, p.b, p.rb, limit) + "</div></div>";
    }).join("") || "<p>No instance matches this filter.</p>";
  }
  function changed(id) {
    page = 0;
    if (id === "shift") { var s = el("shift").value; options(el("a"), s ? DATA.shifts[s] : DATA.configs); }
    if (id === "shift" || id === "a") fillB(el("b").value);
    toHash(); render();
  }
  ["a", "b", "shift", "filter", "right"].forEach(function (id) {
    el(id).addEventListener("input", function () { changed(id); });
  });
__SCRIPT_TAIL__
"""


def render_compare_page(data: Mapping[str, Any]) -> str:
    """The self-contained HTML page of :func:`compare_data`'s output."""
    shifts = f"; shifts {', '.join(data['shifts'])}" if data["shifts"] else ""
    title = f"Side by side: {data['task']}/{data['dataset']} ({len(data['configs'])} configurations{shifts})"
    return fill_page(PAGE, title, data, filters=embed_json(FILTERS), page_size=str(PAGE_SIZE))


def write_compare_pages(out_dir: Path, pages: Mapping[tuple[str, str], Mapping[str, Any]]) -> list[Path]:
    """A side-by-side page per (task, dataset) of ``pages`` that can compare something, and the manifest."""
    out_dir = Path(out_dir)
    written, manifest = [], {}
    for task, dataset in pages:
        data = compare_data(task, dataset, pages)
        if data is None:
            continue
        path = out_dir / compare_page_name(task, dataset)
        path.write_text(render_compare_page(data), encoding="utf-8")
        written.append(path)
        manifest[path.name] = {"configs": data["configs"], "shifts": data["shifts"]}
    (out_dir / COMPARE_MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return written


def compare_pages(out_dir: Path) -> dict[str, dict[str, Any]]:
    """Page name -> {"configs": [...], "shifts": {shift: [configs]}} of the side-by-side pages under
    ``out_dir`` (from :data:`COMPARE_MANIFEST`; {} without one)."""
    return read_manifest(out_dir, COMPARE_MANIFEST)
