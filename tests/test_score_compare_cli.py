"""`python -m src.score` and `python -m src.compare` end to end on files in a temporary folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from src import compare, score
from tests.helpers.paths import REPO_ROOT

TIMEX_GOLD = [
    {
        "id": "s1",
        "doc_id": "d1",
        "text": "We met last week on Friday.",
        "source": "t",
        "spans": [
            {"start": 7, "end": 16, "text": "last week", "label": "TIMEX"},
            {"start": 20, "end": 26, "text": "Friday", "label": "TIMEX"},
        ],
    },
    {
        "id": "s2",
        "doc_id": "d1",
        "text": "It rained for three days in May.",
        "source": "t",
        "spans": [
            {"start": 14, "end": 24, "text": "three days", "label": "TIMEX"},
            {"start": 28, "end": 31, "text": "May", "label": "TIMEX"},
        ],
    },
]
TIMEX_PRED = [
    {"id": "s2", "predictions": ["days", "June"]},
    {"id": "s1", "predictions": ["the last week", "Friday", "Friday"]},
]
COMP_GOLD = [
    {
        "id": "c1",
        "doc_id": "d2",
        "text": "He met her yesterday.",
        "source": "t",
        "spans": [
            {"start": 3, "end": 6, "text": "met", "label": "EVENT"},
            {"start": 11, "end": 20, "text": "yesterday", "label": "TIMEX"},
        ],
    },
]


def write_jsonl(path: Path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def run_module(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )


def test_score_command_end_to_end_with_bootstrap(tmp_path):
    gold = write_jsonl(tmp_path / "gold.jsonl", TIMEX_GOLD)
    pred = write_jsonl(tmp_path / "pred.jsonl", TIMEX_PRED)
    done = run_module("src.score", "--gold", gold, "--pred", pred, "--bootstrap", "200", "--seed", "1")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    # lcs: matched 5/3 + 1/2 = 13/6 over 5 predictions and 4 gold spans
    assert report["n"] == 2
    assert report["lcs"]["precision"] == pytest.approx(13 / 30)
    assert report["lcs"]["recall"] == pytest.approx(13 / 24)
    assert report["lcs"]["f1"] == pytest.approx(26 / 54)
    assert report["strict"]["f1"] == pytest.approx(2 / 9)
    assert report["relaxed"]["f1"] == pytest.approx(6 / 9)
    assert report["errors"] == {"exact": 1, "boundary": 2, "missing": 1, "spurious": 2}
    assert report["predictions_not_in_text"] == 2
    assert "per_label" not in report
    for metric in ("lcs", "strict", "relaxed"):
        low, high = report[metric]["ci95"]
        assert 0.0 <= low <= high <= 1.0


def test_compare_command_end_to_end(tmp_path):
    gold = write_jsonl(tmp_path / "gold.jsonl", TIMEX_GOLD)
    perfect = write_jsonl(
        tmp_path / "a.jsonl", [{"id": g["id"], "predictions": [s["text"] for s in g["spans"]]} for g in TIMEX_GOLD]
    )
    empty = write_jsonl(tmp_path / "b.jsonl", [{"id": g["id"], "predictions": []} for g in TIMEX_GOLD])
    done = run_module(
        "src.compare", "--gold", gold, "--pred-a", perfect, "--pred-b", empty, "--resamples", "500", "--seed", "3"
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["f1_a"], report["f1_b"], report["delta"]) == (1.0, 0.0, 1.0)
    assert report["delta_ci95"] == [1.0, 1.0]
    assert (report["p_value"], report["p_value_two_sided"]) == (0.0, 0.0)


def test_score_reports_per_label_blocks_for_two_label_gold(tmp_path, capsys):
    gold = write_jsonl(tmp_path / "gold.jsonl", COMP_GOLD)
    pred = write_jsonl(
        tmp_path / "pred.jsonl",
        [{"id": "c1", "predictions": [{"text": "met", "label": "TIMEX"}, {"text": "yesterday", "label": "TIMEX"}]}],
    )
    assert score.main(["--gold", gold, "--pred", pred, "--bootstrap", "50"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["lcs"]["f1"] == pytest.approx(0.5)
    timex = report["per_label"]["TIMEX"]["lcs"]
    assert (timex["precision"], timex["recall"], timex["f1"]) == pytest.approx((0.5, 1.0, 2 / 3))
    assert timex["ci95"] == pytest.approx([2 / 3, 2 / 3])  # one instance: every resample is the same
    assert report["per_label"]["EVENT"]["lcs"]["f1"] == 0.0
    assert report["per_label"]["EVENT"]["errors"]["missing"] == 1


def test_compare_identical_systems_in_process(tmp_path, capsys):
    gold = write_jsonl(tmp_path / "gold.jsonl", TIMEX_GOLD)
    pred = write_jsonl(tmp_path / "pred.jsonl", TIMEX_PRED)
    assert compare.main(["--gold", gold, "--pred-a", pred, "--pred-b", pred, "--resamples", "100"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["delta"], report["p_value"], report["p_value_two_sided"]) == (0.0, 0.5, 1.0)


@pytest.mark.parametrize(
    "pred_rows, expected",
    [
        ([TIMEX_PRED[0]], "gold.jsonl:1: id 's1' has no line in the prediction file"),
        (TIMEX_PRED + [{"id": "s9", "predictions": []}], "pred.jsonl:3: id 's9' is not in the gold file"),
        (TIMEX_PRED + [TIMEX_PRED[0]], "pred.jsonl:3: duplicated id 's2' (first on line 1)"),
        ([TIMEX_PRED[0], "{oops"], "pred.jsonl:2: invalid JSON"),
    ],
)
def test_bad_prediction_files_exit_2_and_name_the_line(tmp_path, capsys, pred_rows, expected):
    gold = write_jsonl(tmp_path / "gold.jsonl", TIMEX_GOLD)
    pred = write_jsonl(tmp_path / "pred.jsonl", pred_rows)
    assert score.main(["--gold", gold, "--pred", pred]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and expected in captured.err
    good = write_jsonl(tmp_path / "good.jsonl", TIMEX_PRED)
    assert compare.main(["--gold", gold, "--pred-a", good, "--pred-b", pred]) == 2
    assert expected in capsys.readouterr().err


def test_missing_file_and_bad_options_exit_2(tmp_path, capsys):
    gold = write_jsonl(tmp_path / "gold.jsonl", TIMEX_GOLD)
    assert score.main(["--gold", gold, "--pred", str(tmp_path / "nope.jsonl")]) == 2
    assert "nope.jsonl" in capsys.readouterr().err
    for bad_options in (["--bootstrap", "-1"], ["--seed", "-1"], ["--bootstrap", "1000001"]):
        with pytest.raises(SystemExit) as info:  # argparse's exit, with one line on stderr
            score.main(["--gold", gold, "--pred", gold, *bad_options])
        assert info.value.code == 2
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith(f"python -m src.score: error: argument {bad_options[0]}: expected an integer from 0 to ")
    with pytest.raises(SystemExit) as info:
        compare.main(["--gold", gold])
    assert info.value.code == 2
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_score_cli_error_through_subprocess(tmp_path):
    gold = write_jsonl(tmp_path / "gold.jsonl", TIMEX_GOLD)
    pred = write_jsonl(tmp_path / "pred.jsonl", [TIMEX_PRED[0], {"id": "s1", "predictions": [7]}])
    done = run_module("src.score", "--gold", gold, "--pred", pred)
    assert done.returncode == 2 and done.stdout == ""
    assert "pred.jsonl:2:" in done.stderr


def test_score_variant_released_prints_the_released_scorer(tmp_path: Path):
    gold = write_jsonl(tmp_path / "gold.jsonl", TIMEX_GOLD)
    pred = write_jsonl(tmp_path / "pred.jsonl", TIMEX_PRED)
    done = run_module("src.score", "--gold", gold, "--pred", pred, "--variant", "all")
    assert done.returncode == 0, done.stderr
    blocks = json.loads(done.stdout)["variants"]
    # released, one-to-one with separate P and R matchings (whitespace tokens, longest common run):
    # s1 P: "the last week"~"last week" 2/3 + "Friday"~"Friday" 1 (the 2nd "Friday" unmatched) = 5/3,
    #    R: 2/2 + 1 = 2; s2 P: "days"~"three days" 1/1, R: 1/2. P = (8/3)/5, R = 2.5/4, F1 = 80/139.
    assert blocks["released"]["precision"] == pytest.approx(8 / 15)
    assert blocks["released"]["recall"] == pytest.approx(5 / 8)
    assert blocks["released"]["f1"] == pytest.approx(80 / 139)
    # best-of: the duplicated "Friday" counts again for precision: P = (11/3)/5, F1 = 110/163.
    assert blocks["released_best"]["f1"] == pytest.approx(110 / 163)
    paper = json.loads(run_module("src.score", "--gold", gold, "--pred", pred).stdout)["lcs"]
    assert blocks["paper"]["f1"] == pytest.approx(paper["f1"])


def test_compare_gives_the_calibrated_verdict_by_documents(tmp_path):
    """Issue 47: compare resampled instances and gave no verdict while the report resampled documents. Ten
    sentences of one document: no verdict (1 document); twelve documents: *better* by the permutation test."""

    def gold_rows(documents: int, per_document: int) -> list[dict]:
        return [
            {
                "id": f"doc{d}#s{s}",
                "doc_id": f"doc{d}",
                "text": "We met on Friday.",
                "source": "t",
                "spans": [{"start": 10, "end": 16, "text": "Friday", "label": "TIMEX"}],
            }
            for d in range(documents)
            for s in range(per_document)
        ]

    for documents, per_document, expected, reason in ((1, 10, "inconclusive", "1 document"), (12, 2, "better", None)):
        rows = gold_rows(documents, per_document)
        gold = write_jsonl(tmp_path / f"gold{documents}.jsonl", rows)
        right = write_jsonl(
            tmp_path / f"a{documents}.jsonl", [{"id": r["id"], "predictions": ["Friday"]} for r in rows]
        )
        wrong = write_jsonl(tmp_path / f"b{documents}.jsonl", [{"id": r["id"], "predictions": ["met"]} for r in rows])
        done = run_module("src.compare", "--gold", gold, "--pred-a", right, "--pred-b", wrong, "--resamples", "5000")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["p_value"] == 0.0  # the study's instance-level bootstrap: certainty either way
        verdict = report["verdict"]
        assert (verdict["verdict"], verdict["reason"], verdict["documents"]) == (expected, reason, documents)
        assert verdict["unit"] == "document" and verdict["minimum_documents"] == 6
    assert verdict["p_value"] == 1 / 2**11  # exact: of 4,096 swaps only none and all reach |delta| = 1
