"""The example report: spans bold, edits as ~~old~~ _new_, a few changed instances per dataset."""

from __future__ import annotations

from src.data.schema import Record, Span, write_records
from src.derive import examples
from src.derive.examples import render, report, select_examples


def pair(id_: str, old: str, new: str, span: str, **extra) -> tuple[Record, Record]:
    a, b = old.index(span), new.index(span)
    original = Record(id_, "d", old, [Span(a, a + len(span), span, "TIMEX")], "t")
    derived = Record(
        id_, "d", new, [Span(b, b + len(span), span, "TIMEX")], "t", {"original_text": old, "words_changed": 1, **extra}
    )
    return original, derived


def test_render_marks_spans_replacements_insertions_and_deletions():
    old = "Officials in Macao said on Friday that *Boeing* won."
    new = "Officials in Breken said on Friday that *Lunia* won."
    assert render(old, [Span(27, 33, "Friday", "TIMEX")]) == (
        "Officials in Macao said on **Friday** that \\*Boeing\\* won."
    )
    assert render(new, [Span(28, 34, "Friday", "TIMEX")], old) == (
        "Officials in ~~Macao~~ _Breken_ said on **Friday** that \\*~~Boeing~~ _Lunia_\\* won."
    )
    assert render("He quickly left.", [], "He left.") == "He _quickly_ left."
    assert render("He left.", [], "He left yesterday evening.") == "He left ~~yesterday evening~~."


def test_select_prefers_successful_changed_instances_and_keeps_file_order():
    pairs = [
        pair(f"r{i}", f"Sales rose {i} on Monday.", f"Sales grew {i} on Monday.", "Monday", success=i % 2 == 0)
        for i in range(6)
    ]
    unchanged = pair("same", "Sales rose on Monday.", "Sales rose on Monday.", "Monday")
    derived = [d for _, d in pairs] + [unchanged[1]]
    chosen = select_examples(derived, 2, seed=1)
    assert len(chosen) == 2 and all(r.extra["success"] for r in chosen)
    assert [r.id for r in chosen] == sorted(r.id for r in chosen)
    assert select_examples(derived, 2, seed=1) == chosen
    assert "same" not in {r.id for r in select_examples(derived, 10, seed=1)}


def test_report_and_cli(tmp_path):
    original, derived = pair(
        "x1",
        "Prices fell in Macao last week.",
        "Prices fell in Myfiu last week.",
        "last week",
        derivation="voc",
        replacements={"Macao": "Myfiu"},
    )
    text = report("timex voc", {"x1": original}, [derived], stats={"share_changed": 1.0})
    assert "# timex voc: examples" in text and "1 instances, 1 changed" in text
    assert "replaced: Macao -> Myfiu" in text and '"share_changed": 1.0' in text
    assert "- perturbed: Prices fell in ~~Macao~~ _Myfiu_ **last week**." in text
    write_records(tmp_path / "base.jsonl", [original])
    write_records(tmp_path / "voc.jsonl", [derived])
    out = tmp_path / "report" / "voc.md"
    examples.main(
        [
            "--base",
            str(tmp_path / "base.jsonl"),
            "--derived",
            str(tmp_path / "voc.jsonl"),
            "--output",
            str(out),
            "--title",
            "timex voc",
        ]
    )
    assert "**last week**" in out.read_text()
