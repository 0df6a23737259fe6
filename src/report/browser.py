"""The instance browser: one static HTML page per task/dataset showing every configuration's spans.

A score says how much a configuration got wrong; this page shows what. Each instance's text is
drawn once per configuration with the gold spans underlined and the predicted spans shaded,
each coloured by its match class (exact, boundary, missing, spurious). The classes come from
the study's own word-LCS matching (:mod:`src.scoring.metrics`: one Hungarian assignment
on ``LCS / max length``), so a page's counts equal the logged ``errors.*`` metrics.

The page needs no server: data is embedded as JSON, rendering, filters (configuration,
error type, "configurations disagree", text search) and pagination are inline JavaScript.
``#config=NAME`` in the URL pre-selects a configuration (the report's heatmap links use it).
Beside these pages, :mod:`src.report.side_by_side` writes the side-by-side view of two
configurations (or of base and a shifted set); :func:`compare_href` is its link.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from src.report.side_by_side import compare_page_name, compare_pages, write_compare_pages
from src.report.static_page import GOLD_CLASSES, PRED_CLASSES, classify, embed_json, fill_page, read_manifest

__all__ = [
    "GOLD_CLASSES",
    "PRED_CLASSES",
    "classify",
    "compare_href",
    "compare_link",
    "compare_pages",
    "embed_json",
    "page_data",
    "pages_with",
    "write_instance_pages",
]

#: Raw answers longer than this are cut in the page (the full text is in the MLflow artifact).
RAW_LIMIT = 4000
PAGE_SIZE = 50
#: Page name -> the configurations on it, beside the pages: the report links a heatmap cell only to a page
#: that holds its configuration.
MANIFEST = "pages.json"


def page_name(task: str, dataset: str) -> str:
    """The file name of a task/dataset's page (the report links ``instances/<page_name>``)."""
    return f"{task}_{dataset}.html"


def compare_href(task: str, dataset: str, a: str, b: str | None = None, shift: str | None = None) -> str:
    """The link, relative to ``reports/report.html``, to the side-by-side view of ``task/dataset``.

    Two configurations: ``instances/compare_{task}_{dataset}.html#a=A&b=B`` (without ``b`` the page
    picks the first other configuration). Base against a shifted set for one configuration: ``dataset``
    is the base set the shift was built from (``base``), ``shift`` the derived set (``adv``, ``adv_p``,
    ``voc``): ``instances/compare_{task}_base.html#a=A&shift=adv``. Names are URL-encoded.
    """
    if shift is not None and b is not None:
        raise ValueError("compare_href: a shift compares one configuration with itself; give b or shift, not both")
    if shift is not None and shift == dataset:
        raise ValueError(f"compare_href: dataset is the base set the shift {shift!r} was built from, not the shift")
    parts = [("a", a)] + ([("b", b)] if b is not None else []) + ([("shift", shift)] if shift is not None else [])
    fragment = "&".join(f"{key}={quote(value, safe='')}" for key, value in parts)
    return f"instances/{compare_page_name(task, dataset)}#{fragment}"


def compare_link(out: Path) -> Callable[..., str | None]:
    """``link(task, dataset, a, b=None, shift=None)``: :func:`compare_href` where the side-by-side page
    under ``out/instances`` can show that view (both configurations, or ``a`` on base and on ``shift``),
    else None."""
    pages = compare_pages(Path(out) / "instances")

    def link(task: str, dataset: str, a: str, b: str | None = None, shift: str | None = None) -> str | None:
        entry = pages.get(compare_page_name(task, dataset))
        if entry is None:
            return None
        if shift is not None:
            ok = b is None and a in entry["shifts"].get(shift, ())
        else:
            ok = (
                a in entry["configs"]
                and (b is None or (b != a and b in entry["configs"]))
                and len(entry["configs"]) > 1
            )
        return compare_href(task, dataset, a, b, shift) if ok else None

    return link


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


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body{font-family:sans-serif;max-width:80rem;margin:1rem auto;padding:0 1rem;line-height:1.5}
.bar{position:sticky;top:0;background:#fff;padding:.4rem 0;border-bottom:1px solid #ccc;z-index:1}
.bar label{margin-right:1rem;font-size:.9rem}
.inst{border-bottom:1px solid #ddd;padding:.5rem 0}.inst h3{font-size:.9rem;margin:.2rem 0;color:#555}
.cfg{margin:.2rem 0 .2rem 1rem}.name{display:inline-block;min-width:9rem;font-size:.8rem;color:#333}
__SPAN_CSS__
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
__SCRIPT_HEAD__
  var PAGE_SIZE = __PAGE_SIZE__, page = 0;
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
__SCRIPT_TAIL__
"""


def render_page(data: Mapping[str, Any]) -> str:
    """The self-contained HTML page of :func:`page_data`'s output."""
    title = (
        f"Instances: {data['task']}/{data['dataset']} ({len(data['instances'])} instances, "
        f"{len(data['configs'])} configurations)"
    )
    return fill_page(PAGE, title, data, page_size=str(PAGE_SIZE))


def write_instance_pages(
    out_dir: Path,
    texts: Mapping[tuple[str, str], Mapping[str, str]],
    rows: Mapping[tuple[str, str, str], Sequence[Mapping[str, Any]]],
    lowercase: bool = False,
) -> list[Path]:
    """One page per (task, dataset) in ``rows`` (keys ``(config, task, dataset)``) under ``out_dir``,
    and beside them the side-by-side pages (:func:`src.report.side_by_side.write_compare_pages`).

    ``texts`` maps (task, dataset) to instance id -> text; configurations keep the order of ``rows``.
    Returns the instance pages.
    """
    grouped: dict[tuple[str, str], dict[str, Sequence[Mapping[str, Any]]]] = {}
    for (config, task, dataset), config_rows in rows.items():
        grouped.setdefault((task, dataset), {})[config] = config_rows
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written, manifest, datas = [], {}, {}
    for (task, dataset), by_config in grouped.items():
        data = datas[task, dataset] = page_data(task, dataset, texts.get((task, dataset), {}), by_config, lowercase)
        path = out_dir / page_name(task, dataset)
        path.write_text(render_page(data), encoding="utf-8")
        written.append(path)
        manifest[path.name] = list(by_config)
    write_compare_pages(out_dir, datas)
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return written


def pages_with(out_dir: Path) -> dict[str, set[str]]:
    """Page name -> configurations on it, from the manifest :func:`write_instance_pages` left ({} without one)."""
    return {name: set(configs) for name, configs in read_manifest(out_dir, MANIFEST).items()}
