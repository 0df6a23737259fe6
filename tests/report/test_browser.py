"""The instance browser: span classes agree with the scorer, and each page embeds exactly its data."""

from __future__ import annotations

import json
import re

import pytest

from src.data.schema import Span
from src.report.browser import RAW_LIMIT, classify, page_data, page_name, pages_with, write_instance_pages
from src.scoring.metrics import score_instance

TEXT = "We met on Monday morning and left on Friday."
GOLD = [
    {"text": "Monday morning", "start": 10, "end": 24, "label": "TIMEX"},
    {"text": "Friday", "start": 37, "end": 43, "label": "TIMEX"},
]


def spans(gold):
    return [Span(g["start"], g["end"], g["text"], g["label"]) for g in gold]


@pytest.mark.parametrize(
    "predictions",
    [
        ["Monday morning", "Friday"],
        ["Monday", "Friday"],
        ["Monday"],
        ["We", "left", "Friday"],
        [],
        [{"text": "Friday", "label": "EVENT"}, {"text": "Monday morning", "label": "TIMEX"}],
        ["Friday", "Friday"],
        ["Saturday"],
    ],
)
def test_classes_count_what_the_scorer_counts(predictions):
    result = classify(TEXT, GOLD, predictions)
    scored = score_instance(TEXT, spans(GOLD), predictions)
    assert result["counts"] == {
        "exact": scored.exact,
        "boundary": scored.boundary,
        "missing": scored.missing,
        "spurious": scored.spurious,
    }
    assert [p["cls"] for p in result["preds"]].count("spurious") == scored.spurious
    assert len(result["gold"]) == len(GOLD) and len(result["preds"]) == len(predictions)


def test_each_span_gets_its_class_and_its_place_in_the_text():
    result = classify(TEXT, GOLD, ["Monday", "left", "Saturday"])
    assert result["gold"] == ["boundary", "missing"]
    monday, left, saturday = result["preds"]
    assert (monday["cls"], monday["start"], monday["end"]) == ("boundary", 10, 16)
    assert (left["cls"], TEXT[left["start"] : left["end"]]) == ("spurious", "left")
    assert (saturday["cls"], saturday["start"], saturday["end"]) == ("spurious", None, None)  # not in the text
    # a label that differs from the gold label never matches (as in the scorer)
    labelled = classify(TEXT, GOLD, [{"text": "Friday", "label": "EVENT"}])
    assert labelled["gold"] == ["missing", "missing"] and labelled["preds"][0]["cls"] == "spurious"


def test_a_repeated_string_is_placed_at_the_occurrence_of_its_gold_span():
    text = "Friday came, and Friday left."
    gold = [{"text": "Friday", "start": 17, "end": 23, "label": "TIMEX"}]
    result = classify(text, gold, ["Friday"])
    assert result["preds"][0]["start"] == 17 and result["gold"] == ["exact"]


def rows():
    """Two configurations on two instances: A right on both, B wrong on the second, with a long raw answer."""
    first = {"id": "i1", "gold": GOLD, "raw_output": '["Monday morning", "Friday"]', "parse_ok": True}
    second = {"id": "i2", "gold": [{"text": "noon", "start": 3, "end": 7, "label": "TIMEX"}], "parse_ok": True}
    return {
        "A": [{**first, "predictions": ["Monday morning", "Friday"]}, {**second, "predictions": ["noon"]}],
        "B": [
            {**first, "predictions": ["Friday", "Monday morning"]},
            {
                **second,
                "predictions": [],
                "parse_ok": False,
                "parse_error": "no JSON",
                "truncated": True,
                "raw_output": "</script><b>x</b>" + "y" * (RAW_LIMIT + 10),
            },
        ],
    }


def test_page_data_marks_disagreement_parse_status_and_cuts_long_answers():
    data = page_data("timex", "base", {"i1": TEXT, "i2": "At noon."}, rows())
    assert data["configs"] == ["A", "B"] and [i["id"] for i in data["instances"]] == ["i1", "i2"]
    first, second = data["instances"]
    assert not first["disagree"] and second["disagree"]  # the same span set in another order agrees
    assert first["by"]["B"]["counts"] == {"exact": 2, "boundary": 0, "missing": 0, "spurious": 0}
    failed = second["by"]["B"]
    assert (failed["parse_ok"], failed["parse_error"], failed["truncated"]) == (False, "no JSON", True)
    assert failed["counts"]["missing"] == 1 and failed["gold"] == ["missing"]
    assert len(failed["raw"]) < RAW_LIMIT + 100 and failed["raw"].endswith("[27 more characters]")
    assert second["by"]["A"]["gold"] == ["exact"]


def test_the_page_embeds_its_data_as_json_that_nothing_in_the_answers_can_break_out_of(tmp_path):
    texts = {("timex", "base"): {"i1": TEXT, "i2": "At noon."}, ("timex", "t2c"): {}}
    by_config = {(config, "timex", "base"): config_rows for config, config_rows in rows().items()}
    by_config["A", "timex", "t2c"] = [{"id": "x", "gold": [], "predictions": ["Tuesday"]}]
    paths = write_instance_pages(tmp_path / "instances", texts, by_config)
    assert (
        [p.name for p in paths]
        == [page_name("timex", "base"), page_name("timex", "t2c")]
        == [
            "timex_base.html",
            "timex_t2c.html",
        ]
    )
    page = paths[0].read_text(encoding="utf-8")
    assert page.count("</script>") == 2  # the data's "</script>" is escaped: the page's own two scripts only
    embedded = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S).group(1)
    assert json.loads(embedded) == page_data("timex", "base", texts["timex", "base"], rows())
    assert "location.hash" in page  # #config=NAME pre-selects a configuration
    assert pages_with(tmp_path / "instances") == {"timex_base.html": {"A", "B"}, "timex_t2c.html": {"A"}}
    other = json.loads(re.search(r'id="data">(.*?)</script>', paths[1].read_text(encoding="utf-8"), re.S).group(1))
    assert (
        other["instances"][0]["text_missing"] is True and other["instances"][0]["by"]["A"]["preds"][0]["start"] is None
    )


def test_the_browser_classifies_with_the_scorers_own_matching_and_its_options():
    """The counts a page shows are the scorer's error counts, case folding included."""
    from src.data.schema import Span
    from src.report.browser import classify
    from src.scoring.metrics import score_instance

    text = "On Friday the talks on the last week resumed ."
    gold = [Span(3, 9, "Friday", "TIMEX"), Span(23, 36, "the last week", "TIMEX")]
    cases = [["friday", "last week", "talks"], ["Friday", "the last week"], [], ["resumed"]]
    for predictions in cases:
        for lowercase in (False, True):
            shown = classify(text, [g.to_dict() for g in gold], predictions, lowercase)["counts"]
            scored = score_instance(text, gold, predictions, lowercase)
            assert shown == {name: getattr(scored, name) for name in ("exact", "boundary", "missing", "spurious")}
    assert classify(text, [g.to_dict() for g in gold], ["friday"], lowercase=True)["gold"][0] == "exact"
    assert classify(text, [g.to_dict() for g in gold], ["friday"])["gold"][0] == "missing"
