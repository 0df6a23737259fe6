"""What the static instance pages share: one instance's spans as the scorer matched them, and the page kit.

Both the instance browser (:mod:`src.report.browser`) and the side-by-side view
(:mod:`src.report.side_by_side`) read a configuration's answer on an instance through
:func:`classify`, so a span's colour, a page's counts and an instance's "right" or "wrong"
are the scorer's (:mod:`src.scoring.metrics`), not a re-implementation of it. They also share
the span colours and drawing (:data:`SPAN_CSS`, :data:`SCRIPT_HEAD`), the pager (:data:`SCRIPT_TAIL`), how a template is
filled (:func:`fill_page`) and how a folder's manifest of pages is read (:func:`read_manifest`).
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from src.scoring.calibrated import instance_f1 as calibrated_f1
from src.scoring.metrics import as_predicted_span, match_spans

#: Match classes of a gold span and of a predicted span (``src.scoring.metrics`` error types).
GOLD_CLASSES = ("exact", "boundary", "missing")
PRED_CLASSES = ("exact", "boundary", "spurious")


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


def instance_f1(matched: float, n_pred: int, n_gold: int) -> float:
    """The instance's LCS F1, ``2 matched / (n_pred + n_gold)``; 1 when it has neither gold nor predicted
    spans (nothing to find and nothing found: the one convention of :func:`src.scoring.calibrated.instance_f1`)."""
    return round(float(calibrated_f1(np.array([matched, n_pred, n_gold], dtype=np.float64))), 6)


def classify(
    text: str, gold: Sequence[Mapping[str, Any]], predictions: Sequence[Any], lowercase: bool = False
) -> dict[str, Any]:
    """Match one configuration's predictions against the gold spans with the scorer's own matching
    (:func:`src.scoring.metrics.match_spans`, under the run's ``scoring.lowercase``).

    Returns ``{"gold": [class per gold span], "preds": [{"text", "label", "cls", "start", "end"}],
    "counts": {exact, boundary, missing, spurious}, "f1": instance LCS F1 (1 with neither gold nor predicted span)}``; a prediction's
    offsets are its occurrence in ``text`` nearest to its matched gold span (None when the string is
    not in the text).
    """
    preds = []
    for item in predictions:
        try:
            preds.append(as_predicted_span(item))
        except ValueError:
            preds.append(as_predicted_span(str(item)))
    spans = [_Gold(str(g.get("text", "")), g.get("label")) for g in gold]
    match = match_spans(preds, spans, lowercase)
    gold_cls, pred_cls, partner = match.classes()
    matched = float(match.similarity[match.rows, match.cols].sum()) if len(match.rows) else 0.0
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
    return {"gold": gold_cls, "preds": out, "counts": counts, "f1": instance_f1(matched, len(preds), len(spans))}


def embed_json(data: Any) -> str:
    """JSON safe inside a ``<script>`` element (no ``</script>`` or ``<!--`` can end it early)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


#: The pages' shared CSS of match classes: gold spans underlined, predicted spans shaded.
SPAN_CSS = """.txt{font-family:Georgia,serif}.g-exact{border-bottom:3px solid #2a9d4b}
.g-boundary{border-bottom:3px solid #e39b2d}.g-missing{border-bottom:3px solid #d1495b}
.p-exact{background:#c8ecd2}.p-boundary{background:#fbe2b8}.p-spurious{background:#e2cdf0}"""

#: The pages' list and the start of their script: ``DATA`` (the embedded JSON), ``el(id)``, ``esc(s)``
#: (HTML-escaped text) and ``marked(inst, result)`` (the instance's text as HTML, each character inside a
#: gold span and/or a predicted span wrapped in a ``<span>`` of its classes), for an ``inst`` with
#: ``text`` and ``gold`` and a :func:`classify` result.
SCRIPT_HEAD = r"""<div id="list"></div>
<script type="application/json" id="data">__DATA__</script>
<script>
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("data").textContent);
  var el = function (id) { return document.getElementById(id); };
  var esc = function (s) {
    return String(s).replace(/[&<>"]/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c];
    });
  };
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
"""

#: The end of the pages' script: the ``prev``/``next`` pager, the URL fragment read again when it
#: changes (the page's ``fromHash``), then the first ``render``.
SCRIPT_TAIL = """
  el("prev").addEventListener("click", function () { page = Math.max(0, page - 1); render(); });
  el("next").addEventListener("click", function () { page += 1; render(); });
  window.addEventListener("hashchange", function () { fromHash(); render(); });
  fromHash(); render();
})();
</script>
</body></html>
"""


def fill_page(template: str, title: str, data: Any, **values: str) -> str:
    """``template`` with its ``__SPAN_CSS__``, ``__SCRIPT_HEAD__``, ``__SCRIPT_TAIL__``, ``__TITLE__``
    (escaped here), ``__DATA__`` (``data`` as :func:`embed_json`) and ``__NAME__`` for each of ``values``."""
    page = template.replace("__SPAN_CSS__", SPAN_CSS).replace("__SCRIPT_HEAD__", SCRIPT_HEAD.rstrip("\n"))
    page = page.replace("__SCRIPT_TAIL__", SCRIPT_TAIL.strip("\n"))
    for name, value in values.items():
        page = page.replace(f"__{name.upper()}__", value)
    return page.replace("__TITLE__", html.escape(title)).replace("__DATA__", embed_json(data))


def read_manifest(folder: Path, name: str) -> dict[str, Any]:
    """A pages folder's manifest ``name`` (page name -> what it holds), for the pages that exist ({} without one)."""
    try:
        manifest = json.loads((Path(folder) / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {page: entry for page, entry in manifest.items() if (Path(folder) / page).exists()}
