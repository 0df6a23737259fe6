"""The instance browser: one static HTML page per task/dataset showing every configuration's spans.

A score says how much a configuration got wrong; this page shows what. Each instance's text is
drawn once per configuration with the gold spans underlined and the predicted spans shaded,
each coloured by its match class (exact, boundary, missing, spurious). The classes come from
the study's own word-LCS matching (:mod:`src.scoring.metrics`: one Hungarian assignment
on ``LCS / max length``), so a page's counts equal the logged ``errors.*`` metrics.

The page needs no server: data is embedded as JSON, rendering, filters (configuration,
error type, "configurations disagree", text search) and pagination are inline JavaScript.
``#config=NAME`` in the URL pre-selects a configuration (the report's heatmap links use it).
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from src.scoring.metrics import as_predicted_span, match_spans

#: Match classes of a gold span and of a predicted span (``src.scoring.metrics`` error types).
GOLD_CLASSES = ("exact", "boundary", "missing")
PRED_CLASSES = ("exact", "boundary", "spurious")
#: Raw answers longer than this are cut in the page (the full text is in the MLflow artifact).
RAW_LIMIT = 4000
PAGE_SIZE = 50
#: Page name -> the configurations on it, beside the pages: the report links a heatmap cell only to a page
#: that holds its configuration.
MANIFEST = "pages.json"


def page_name(task: str, dataset: str) -> str:
    """The file name of a task/dataset's page (the report links ``instances/<page_name>``)."""
    return f"{task}_{dataset}.html"


def _find(text: str, needle: str, near: int | None, used: set[int]) -> int | None:
    """The start of an occurrence of ``needle`` in ``text``: nearest to ``near``, else the first unused."""
    if not needle:
        return None
    starts, at = [], text.find(needle)
    while at >= 0:
        starts.append(at)
        at = text.find(needle, at + 1)
    if not starts:
        return None
    if near is not None:
        return min(starts, key=lambda s: (abs(s - near), s))
    free = [s for s in starts if s not in used]
    return (free or starts)[0]


class _Gold(NamedTuple):
    text: str
    label: str | None


def classify(
    text: str, gold: Sequence[Mapping[str, Any]], predictions: Sequence[Any], lowercase: bool = False
) -> dict[str, Any]:
    """Match one configuration's predictions against the gold spans with the scorer's own matching
    (:func:`src.scoring.metrics.match_spans`, under the run's ``scoring.lowercase``).

    Returns ``{"gold": [class per gold span], "preds": [{"text", "label", "cls", "start", "end"}],
    "counts": {exact, boundary, missing, spurious}}``; a prediction's offsets are its occurrence in
    ``text`` nearest to its matched gold span (None when the string is not in the text).
    """
    preds = []
    for item in predictions:
        try:
            preds.append(as_predicted_span(item))
        except ValueError:
            preds.append(as_predicted_span(str(item)))
    spans = [_Gold(str(g.get("text", "")), g.get("label")) for g in gold]
    gold_cls, pred_cls, partner = match_spans(preds, spans, lowercase).classes()
    out, used = [], set()
    for i, p in enumerate(preds):
        near = gold[partner[i]].get("start") if partner[i] is not None else None
        start = _find(text, p.text, near, used)
        if start is not None:
            used.add(start)
        out.append(
            {
                "text": p.text,
                "label": p.label,
                "cls": pred_cls[i],
                "start": start,
                "end": None if start is None else start + len(p.text),
            }
        )
    counts = {name: gold_cls.count(name) for name in ("exact", "boundary", "missing")}
    counts["spurious"] = pred_cls.count("spurious")
    return {"gold": gold_cls, "preds": out, "counts": counts}


def _raw(value: Any) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= RAW_LIMIT else text[:RAW_LIMIT] + f" … [{len(text) - RAW_LIMIT} more characters]"


def page_data(
    task: str,
    dataset: str,
    texts: Mapping[str, str],
    rows_by_config: Mapping[str, Sequence[Mapping[str, Any]]],
    lowercase: bool = False,
) -> dict[str, Any]:
    """The JSON a page embeds: the configurations, and per instance its text, gold and each configuration's result.

    Instances are in the order first seen (configuration by configuration); an instance without a
    text (not in ``texts``) is kept with the text empty and ``"text_missing": true``.
    """
    configs = list(rows_by_config)
    instances: dict[str, dict[str, Any]] = {}
    for config in configs:
        for row in rows_by_config[config]:
            key = str(row["id"])
            text = texts.get(key)
            entry = instances.setdefault(
                key,
                {
                    "id": key,
                    "text": text or "",
                    "text_missing": text is None,
                    "gold": [
                        {"text": g.get("text"), "start": g.get("start"), "end": g.get("end"), "label": g.get("label")}
                        for g in row.get("gold") or []
                    ],
                    "by": {},
                },
            )
            result = classify(entry["text"], entry["gold"], row.get("predictions") or [], lowercase)
            parse_ok = bool(row.get("parse_ok", True)) and not row.get("request_error")
            entry["by"][config] = {
                **result,
                "parse_ok": parse_ok,
                "parse_error": row.get("parse_error") or row.get("request_error"),
                "truncated": bool(row.get("truncated")),
                "served": row.get("served"),
                "raw": _raw(row.get("raw_output")),
            }
    for entry in instances.values():
        answers = {
            config: tuple(sorted((p["text"], p["label"] or "") for p in result["preds"]))
            for config, result in entry["by"].items()
        }
        entry["disagree"] = len(set(answers.values())) > 1
    return {"task": task, "dataset": dataset, "configs": configs, "instances": list(instances.values())}


def embed_json(data: Any) -> str:
    """JSON safe inside a ``<script>`` element (no ``</script>`` or ``<!--`` can end it early)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body{font-family:sans-serif;max-width:80rem;margin:1rem auto;padding:0 1rem;line-height:1.5}
.bar{position:sticky;top:0;background:#fff;padding:.4rem 0;border-bottom:1px solid #ccc;z-index:1}
.bar label{margin-right:1rem;font-size:.9rem}
.inst{border-bottom:1px solid #ddd;padding:.5rem 0}.inst h3{font-size:.9rem;margin:.2rem 0;color:#555}
.cfg{margin:.2rem 0 .2rem 1rem}.name{display:inline-block;min-width:9rem;font-size:.8rem;color:#333}
.txt{font-family:Georgia,serif}.g-exact{border-bottom:3px solid #2a9d4b}
.g-boundary{border-bottom:3px solid #e39b2d}.g-missing{border-bottom:3px solid #d1495b}
.p-exact{background:#c8ecd2}.p-boundary{background:#fbe2b8}.p-spurious{background:#e2cdf0}
.legend span{margin-right:1rem;padding:0 .3rem}.flag{color:#d1495b;font-size:.8rem}
details{font-size:.8rem;margin-left:10rem}pre{white-space:pre-wrap;background:#f6f6f6;padding:.3rem}
.small{font-size:.8rem;color:#555}
</style></head><body>
<h1>__TITLE__</h1>
<p class="legend"><b>Legend</b>: gold spans underlined, predicted spans shaded, by match class
(the scorer's word-LCS matching): <span class="g-exact p-exact">exact</span>
<span class="g-boundary p-boundary">boundary mismatch</span> <span class="g-missing">missing (gold, not found)</span>
<span class="p-spurious">spurious (predicted, no gold)</span> <span class="flag">parse failure / truncated</span></p>
<div class="bar">
<label>configuration <select id="config"><option value="">all</option></select></label>
<label>error <select id="error"><option value="">any</option><option value="missing">missing</option>
<option value="spurious">spurious</option><option value="boundary">boundary</option>
<option value="parse">parse failure</option><option value="correct">none (all exact)</option></select></label>
<label><input type="checkbox" id="disagree"> configurations disagree</label>
<label>search <input id="search" type="search" placeholder="text or span"></label>
<button id="prev">&larr;</button> <span id="pos" class="small"></span> <button id="next">&rarr;</button>
</div>
<div id="list"></div>
<script type="application/json" id="data">__DATA__</script>
<script>
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("data").textContent);
  var PAGE_SIZE = __PAGE_SIZE__, page = 0;
  var el = function (id) { return document.getElementById(id); };
  var esc = function (s) {
    return String(s).replace(/[&<>"]/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c];
    });
  };
  DATA.configs.forEach(function (c) {
    var o = document.createElement("option"); o.value = c; o.textContent = c; el("config").appendChild(o);
  });
  function fromHash() {
    var m = /(?:^#|&)config=([^&]*)/.exec(location.hash);
    var name = m ? decodeURIComponent(m[1]) : "";
    el("config").value = DATA.configs.indexOf(name) >= 0 ? name : "";
    page = 0;
  }
  function chosen() { var c = el("config").value; return c ? [c] : DATA.configs; }
  function hasError(inst, configs, kind) {
    return configs.some(function (c) {
      var r = inst.by[c]; if (!r) return false;
      if (kind === "parse") return !r.parse_ok || r.truncated;
      if (kind === "correct") return r.counts.missing + r.counts.spurious + r.counts.boundary === 0;
      return r.counts[kind] > 0;
    });
  }
  function visible() {
    var configs = chosen(), kind = el("error").value, q = el("search").value.toLowerCase();
    return DATA.instances.filter(function (inst) {
      if (!configs.some(function (c) { return inst.by[c]; })) return false;
      if (kind && !hasError(inst, configs, kind)) return false;
      if (el("disagree").checked && !inst.disagree) return false;
      if (q) {
        var hay = (inst.id + " " + inst.text).toLowerCase();
        configs.forEach(function (c) {
          if (inst.by[c]) inst.by[c].preds.forEach(function (p) { hay += " " + p.text.toLowerCase(); });
        });
        if (hay.indexOf(q) < 0) return false;
      }
      return true;
    });
  }
  function marked(inst, result) {
    var n = inst.text.length, gold = new Array(n), pred = new Array(n), i;
    inst.gold.forEach(function (g, j) {
      if (g.start == null) return;
      for (i = g.start; i < Math.min(g.end, n); i++) gold[i] = result.gold[j];
    });
    result.preds.forEach(function (p) {
      if (p.start == null) return;
      for (i = p.start; i < Math.min(p.end, n); i++) if (!pred[i] || pred[i] === "spurious") pred[i] = p.cls;
    });
    var out = "", start = 0;
    for (i = 1; i <= n; i++) {
      if (i === n || gold[i] !== gold[start] || pred[i] !== pred[start]) {
        var cls = (gold[start] ? "g-" + gold[start] : "") + (pred[start] ? " p-" + pred[start] : "");
        var piece = esc(inst.text.slice(start, i));
        out += cls.trim() ? '<span class="' + cls.trim() + '">' + piece + "</span>" : piece;
        start = i;
      }
    }
    return out;
  }
  function render() {
    var rows = visible(), configs = chosen(), pages = Math.max(1, Math.ceil(rows.length / PAGE_SIZE));
    page = Math.min(page, pages - 1);
    el("pos").textContent = "page " + (page + 1) + " of " + pages + " (" + rows.length + " of " +
      DATA.instances.length + " instances)";
    el("list").innerHTML = rows.slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE).map(function (inst) {
      var parts = ['<div class="inst"><h3>' + esc(inst.id) + (inst.disagree ? " &middot; configurations disagree" : "") +
                   (inst.text_missing ? " &middot; text not available" : "") + "</h3>"];
      configs.forEach(function (c) {
        var r = inst.by[c]; if (!r) return;
        var away = r.preds.filter(function (p) { return p.start == null; }).map(function (p) {
          return '<span class="p-' + p.cls + '">' + esc(p.text) + "</span>";
        });
        var flags = (r.parse_ok ? "" : " parse failure") + (r.truncated ? " truncated" : "");
        parts.push('<div class="cfg" data-config="' + esc(c) + '"><span class="name">' + esc(c) + "</span> " +
          '<span class="txt">' + marked(inst, r) + "</span>" +
          (away.length ? ' <span class="small">not in text: ' + away.join(", ") + "</span>" : "") +
          (flags ? ' <span class="flag">' + flags + "</span>" : "") +
          "<details><summary>raw answer and parse status</summary><p>parse: " +
          (r.parse_ok ? "ok" : "failed" + (r.parse_error ? " (" + esc(r.parse_error) + ")" : "")) +
          (r.truncated ? "; truncated by the token budget" : "") + (r.served ? "; served by " + esc(r.served) : "") +
          "; exact " + r.counts.exact + ", boundary " + r.counts.boundary + ", missing " + r.counts.missing +
          ", spurious " + r.counts.spurious + "</p><pre>" + esc(r.raw == null ? "(no raw answer)" : r.raw) +
          "</pre></details></div>");
      });
      return parts.join("") + "</div>";
    }).join("") || "<p>No instance matches these filters.</p>";
  }
  ["config", "error", "disagree", "search"].forEach(function (id) {
    el(id).addEventListener("input", function () {
      page = 0;
      if (id === "config") history.replaceState(null, "", el("config").value ?
        "#config=" + encodeURIComponent(el("config").value) : location.pathname + location.search);
      render();
    });
  });
  el("prev").addEventListener("click", function () { page = Math.max(0, page - 1); render(); });
  el("next").addEventListener("click", function () { page += 1; render(); });
  window.addEventListener("hashchange", function () { fromHash(); render(); });
  fromHash(); render();
})();
</script>
</body></html>
"""


def render_page(data: Mapping[str, Any]) -> str:
    """The self-contained HTML page of :func:`page_data`'s output."""
    title = html.escape(
        f"Instances: {data['task']}/{data['dataset']} ({len(data['instances'])} instances, "
        f"{len(data['configs'])} configurations)"
    )
    return (
        PAGE.replace("__TITLE__", title).replace("__PAGE_SIZE__", str(PAGE_SIZE)).replace("__DATA__", embed_json(data))
    )


def write_instance_pages(
    out_dir: Path,
    texts: Mapping[tuple[str, str], Mapping[str, str]],
    rows: Mapping[tuple[str, str, str], Sequence[Mapping[str, Any]]],
    lowercase: bool = False,
) -> list[Path]:
    """One page per (task, dataset) in ``rows`` (keys ``(config, task, dataset)``) under ``out_dir``.

    ``texts`` maps (task, dataset) to instance id -> text; configurations keep the order of ``rows``.
    """
    grouped: dict[tuple[str, str], dict[str, Sequence[Mapping[str, Any]]]] = {}
    for (config, task, dataset), config_rows in rows.items():
        grouped.setdefault((task, dataset), {})[config] = config_rows
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written, manifest = [], {}
    for (task, dataset), by_config in grouped.items():
        data = page_data(task, dataset, texts.get((task, dataset), {}), by_config, lowercase)
        path = out_dir / page_name(task, dataset)
        path.write_text(render_page(data), encoding="utf-8")
        written.append(path)
        manifest[path.name] = list(by_config)
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return written


def pages_with(out_dir: Path) -> dict[str, set[str]]:
    """Page name -> configurations on it, from the manifest :func:`write_instance_pages` left ({} without one)."""
    path = Path(out_dir) / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {name: set(configs) for name, configs in manifest.items() if (Path(out_dir) / name).exists()}
