"""The side-by-side pages' data and links (the page itself is driven in Chromium:
tests/scale/test_side_by_side_browser.py)."""

from __future__ import annotations

import json
import re

import pytest

from src.data.schema import Span
from src.report.browser import classify, compare_href, compare_link, page_data, write_instance_pages
from src.report.side_by_side import compare_data, compare_pages
from src.scoring.metrics import score_instance

TEXT = "We met on Monday morning and left on Friday."
GOLD = [
    {"text": "Monday morning", "start": 10, "end": 24, "label": "TIMEX"},
    {"text": "Friday", "start": 37, "end": 43, "label": "TIMEX"},
]


def test_compare_href_selects_a_and_b_or_a_shift_url_encoded():
    assert (
        compare_href("timex", "base", "small-D", "large-I") == "instances/compare_timex_base.html#a=small-D&b=large-I"
    )
    assert compare_href("timex", "t2c", "a b/c&d") == "instances/compare_timex_t2c.html#a=a%20b%2Fc%26d"
    assert (
        compare_href("eventx", "base", "m-I", shift="adv_p") == "instances/compare_eventx_base.html#a=m-I&shift=adv_p"
    )
    with pytest.raises(ValueError, match="not both"):
        compare_href("timex", "base", "a", "b", shift="adv")
    with pytest.raises(ValueError, match="base set"):
        compare_href("timex", "adv", "a", shift="adv")


@pytest.mark.parametrize(
    "predictions",
    [["Monday morning", "Friday"], ["Monday", "Friday"], ["Monday"], ["We", "left"], [], ["Friday", "Friday"]],
)
def test_an_instances_f1_is_the_scorers(predictions):
    scored = score_instance(TEXT, [Span(g["start"], g["end"], g["text"], g["label"]) for g in GOLD], predictions)
    assert classify(TEXT, GOLD, predictions)["f1"] == pytest.approx(2 * scored.lcs / (scored.n_pred + scored.n_gold))
    assert classify("Nothing.", [], [])["f1"] == 1.0  # nothing to find, nothing found: the one convention
    assert classify("Nothing.", [], ["Nothing"])["f1"] == 0.0


def rows(ids, predictions):
    return [{"id": i, "gold": GOLD, "predictions": p, "raw_output": "x" * 50} for i, p in zip(ids, predictions)]


def pages():
    base = {"A": rows(["i1", "i2"], [["Friday"], []]), "B": rows(["i1", "i2"], [["Friday"], ["Friday"]])}
    shifted = {"A": rows(["i2"], [["Friday"]]), "C": rows(["i2"], [[]])}
    other = {"A": rows(["x1"], [[]])}
    texts = {"i1": TEXT, "i2": TEXT}
    return {
        ("timex", "base"): page_data("timex", "base", texts, base),
        ("timex", "adv"): page_data("timex", "adv", texts, shifted),
        ("timex", "t2c"): page_data("timex", "t2c", {}, other),
        ("eventx", "voc"): page_data("eventx", "voc", texts, shifted),  # no eventx base: nothing to shift from
    }


def test_compare_data_holds_the_configurations_and_the_shifts_that_share_ids_and_configurations():
    data = compare_data("timex", "base", pages())
    assert data["configs"] == ["A", "B"] and data["shifts"] == {"adv": ["A"]}
    assert [i["id"] for i in data["sets"]["base"]] == ["i1", "i2"] and [i["id"] for i in data["sets"]["adv"]] == ["i2"]
    kept = data["sets"]["adv"][0]["by"]
    assert list(kept) == ["A"] and set(kept["A"]) == {"gold", "preds", "counts", "f1", "parse_ok", "truncated"}
    assert compare_data("timex", "t2c", pages()) is None  # one configuration, no shift: nothing to compare
    assert compare_data("timex", "adv", pages())["shifts"] == {}  # a shifted set compares configurations only


def test_the_pages_their_manifest_and_the_links_to_views_that_exist(tmp_path):
    by_key = {
        ("A", "timex", "base"): rows(["i1", "i2"], [["Friday"], []]),
        ("B", "timex", "base"): rows(["i1", "i2"], [["Friday"], ["Friday"]]),
        ("A", "timex", "adv"): rows(["i2"], [["Friday"]]),
        ("A", "timex", "t2c"): rows(["x1"], [[]]),
    }
    texts = {("timex", "base"): {"i1": TEXT, "i2": "</script><!-- x"}}
    out = tmp_path / "reports"
    names = [p.name for p in write_instance_pages(out / "instances", texts, by_key)]
    assert names == ["timex_base.html", "timex_adv.html", "timex_t2c.html"]  # the instance pages, as before
    assert compare_pages(out / "instances") == {
        "compare_timex_base.html": {"configs": ["A", "B"], "shifts": {"adv": ["A"]}}
    }
    page = (out / "instances" / "compare_timex_base.html").read_text(encoding="utf-8")
    assert page.count("</script>") == 2  # the text's "</script>" cannot end the data early
    embedded = json.loads(re.search(r'id="data">(.*?)</script>', page, re.S).group(1))
    assert embedded["sets"]["base"][1]["text"] == "</script><!-- x"
    before = page
    write_instance_pages(out / "instances", texts, by_key)
    assert (out / "instances" / "compare_timex_base.html").read_text(encoding="utf-8") == before  # byte-identical

    link = compare_link(out)
    assert link("timex", "base", "A", "B") == compare_href("timex", "base", "A", "B")
    assert link("timex", "base", "A") == "instances/compare_timex_base.html#a=A"
    assert link("timex", "base", "A", shift="adv") == "instances/compare_timex_base.html#a=A&shift=adv"
    assert link("timex", "base", "B", shift="adv") is None  # B has no run on adv
    assert link("timex", "base", "A", "Z") is None and link("timex", "base", "A", "A") is None
    assert link("timex", "t2c", "A") is None  # one configuration: no page
    assert link("eventx", "base", "A", "B") is None
