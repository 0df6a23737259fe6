"""Issue #10, input half: every bad input to ``src.score`` / ``src.compare`` is one line on stderr.

Each kind of bad input below is written to a file (gold side or prediction side) and run
through ``score.main`` and ``compare.main`` in-process; the contract is exit code 2, nothing
on stdout, exactly one line on stderr naming the file (and ``:LINE`` where a line is at
fault) and no traceback. A handful of subprocess runs check the same contract end to end,
where a traceback would really be printed (recursion, the int-string limit, memory,
options), and the broken-pipe behaviour (quiet exit 141).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from src import compare, score
from tests.helpers.paths import REPO_ROOT

GOLD = [
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
        "spans": [{"start": 14, "end": 24, "text": "three days", "label": "TIMEX"}],
    },
]
PRED = [{"id": "s1", "predictions": ["last week"]}, {"id": "s2", "predictions": ["days"]}]


def line(obj) -> bytes:
    return (obj if isinstance(obj, str) else json.dumps(obj)).encode("utf-8") + b"\n"


def gold_with(**changes) -> bytes:
    """The gold file with the second record changed (so the fault is on line 2)."""
    return line(GOLD[0]) + line(dict(GOLD[1], **changes))


def gold_span(**changes) -> bytes:
    return gold_with(spans=[dict(GOLD[1]["spans"][0], **changes)])


def gold_raw(old: bytes, new: bytes) -> bytes:
    """The gold file with ``old`` replaced by ``new`` in its second line only (raw JSON text)."""
    first, second = gold_span(start=1).splitlines()
    assert old in second
    return first + b"\n" + second.replace(old, new) + b"\n"


def pred_second(raw) -> bytes:
    """The prediction file with line 2 replaced by ``raw`` (bytes, str or object)."""
    return line(PRED[0]) + (raw if isinstance(raw, bytes) else line(raw))


def pred_items(*items) -> bytes:
    return pred_second({"id": "s2", "predictions": list(items)})


@dataclass(frozen=True)
class Case:
    kind: str
    side: str  # "gold" or "pred": which file holds the fault
    content: bytes | None  # None: the file is made by ``special``
    message: str  # expected in the stderr line
    line: int | None = None  # the ":LINE" expected after the file name
    special: str = ""


DEEP = b"[" * 50_000 + b"]" * 50_000
BIG_INT = b"9" * 5000
CASES = [
    # -- bytes and JSON, gold side
    Case(
        "gold latin-1 byte",
        "gold",
        line(GOLD[0]) + '{"id": "s\xe9"}\n'.encode("latin-1"),
        "not UTF-8 text (byte 0xe9",
        2,
    ),
    Case("gold UTF-16 with BOM", "gold", line(GOLD[0]).decode().encode("utf-16"), "not UTF-8 text (byte 0xff", 1),
    Case("gold random bytes", "gold", bytes(range(128, 256)) + b"\n", "not UTF-8 text (byte 0x80", 1),
    Case("gold UTF-8 BOM", "gold", b"\xef\xbb\xbf" + line(GOLD[0]), "invalid JSON (Unexpected UTF-8 BOM", 1),
    Case("gold deep nesting", "gold", line(GOLD[0]) + DEEP + b"\n", "invalid JSON (nested too deeply)", 2),
    Case(
        "gold 5000-digit start",
        "gold",
        gold_raw(b'"start": 1', b'"start": ' + BIG_INT),
        "integer with 5000 digits is out of range",
        2,
    ),
    Case("gold start Infinity", "gold", gold_raw(b'"start": 1', b'"start": Infinity'), "Infinity is not valid JSON", 2),
    Case(
        "gold start -Infinity", "gold", gold_raw(b'"start": 1', b'"start": -Infinity'), "-Infinity is not valid JSON", 2
    ),
    Case("gold start NaN", "gold", gold_raw(b'"start": 1', b'"start": NaN'), "NaN is not valid JSON", 2),
    Case("gold start 1e400", "gold", gold_raw(b'"start": 1', b'"start": 1e400'), "number '1e400' is out of range", 2),
    Case(
        "gold duplicated key",
        "gold",
        line(GOLD[0]) + line(GOLD[1])[:-2] + b', "spans": []}\n',
        "duplicated key 'spans'",
        2,
    ),
    Case(
        "gold duplicated key in a span",
        "gold",
        gold_raw(b'"label": "TIMEX"', b'"label": "TIMEX", "start": 0'),
        "duplicated key 'start'",
        2,
    ),
    Case("gold invalid JSON", "gold", line(GOLD[0]) + b"{oops\n", "invalid JSON", 2),
    Case("gold truncated line", "gold", line(GOLD[0]) + line(GOLD[1])[:30] + b"\n", "invalid JSON", 2),
    Case("gold two objects on a line", "gold", line(GOLD[0])[:-1] + line(GOLD[1]), "invalid JSON (Extra data", 1),
    Case("gold JSON array", "gold", line(GOLD[0]) + line([GOLD[1]]), "expected a JSON object, got list", 2),
    Case("gold JSON string", "gold", line(GOLD[0]) + b'"s2"\n', "expected a JSON object, got str", 2),
    Case("gold JSON null", "gold", line(GOLD[0]) + b"null\n", "expected a JSON object, got NoneType", 2),
    Case("gold empty file", "gold", b"", "no records"),
    Case("gold only blank lines", "gold", b"\n  \n\n", "no records"),
    Case(
        "gold blank line between records",
        "gold",
        line(GOLD[0]) + b"\n" + line(GOLD[1]),
        "blank line inside the file",
        2,
    ),
    # -- record fields, gold side
    Case(
        "gold missing id",
        "gold",
        line(GOLD[0]) + line({k: v for k, v in GOLD[1].items() if k != "id"}),
        "missing key(s) id",
        2,
    ),
    Case(
        "gold missing spans",
        "gold",
        line(GOLD[0]) + line({k: v for k, v in GOLD[1].items() if k != "spans"}),
        "missing key(s) spans",
        2,
    ),
    Case("gold id not a string", "gold", gold_with(id=2), "'id' must be a string, got 2", 2),
    Case("gold text not a string", "gold", gold_with(text=None), "'text' must be a string", 2),
    Case("gold spans not a list", "gold", gold_with(spans={"start": 0}), "'spans' must be a list, got dict", 2),
    Case("gold span not an object", "gold", gold_with(spans=["three days"]), "spans[0] must be a JSON object", 2),
    Case(
        "gold span missing end",
        "gold",
        gold_with(spans=[{"start": 14, "text": "three days", "label": "TIMEX"}]),
        "spans[0] is missing key(s) end",
        2,
    ),
    Case("gold start float", "gold", gold_span(start=14.0), "spans[0].start must be an integer, got 14.0", 2),
    Case("gold start string", "gold", gold_span(start="14"), "spans[0].start must be an integer, got '14'", 2),
    Case(
        "gold start boolean",
        "gold",
        gold_span(start=True, end=2, text="t"),
        "spans[0].start must be an integer, got True",
        2,
    ),
    Case(
        "gold end boolean",
        "gold",
        gold_span(start=0, end=True, text="I"),
        "spans[0].end must be an integer, got True",
        2,
    ),
    Case("gold negative start", "gold", gold_span(start=-1), "spans[0].start must be >= 0", 2),
    Case("gold end past the text", "gold", gold_span(end=99), "outside text of length 32", 2),
    Case("gold start after end", "gold", gold_span(start=24, end=14), "span 24-14 is empty or reversed", 2),
    Case("gold empty span", "gold", gold_span(start=14, end=14, text=""), "span 14-14 is empty or reversed", 2),
    Case("gold text mismatch", "gold", gold_span(text="four days"), "not the span text 'four days'", 2),
    Case("gold unknown label", "gold", gold_span(label="DATE"), "unknown label 'DATE'", 2),
    Case("gold span text not a string", "gold", gold_span(text=3), "spans[0].text must be a string", 2),
    Case(
        "gold span without word characters", "gold", gold_span(start=31, end=32, text="."), "has no word character", 2
    ),
    Case("gold whitespace span", "gold", gold_span(start=13, end=14, text=" "), "has no word character", 2),
    Case("gold span listed twice", "gold", gold_with(spans=GOLD[1]["spans"] * 2), "spans[1] repeats spans[0]", 2),
    Case(
        "gold duplicated id",
        "gold",
        line(GOLD[0]) + line(dict(GOLD[1], id="s1")),
        "duplicated id 's1' (first on line 1)",
        2,
    ),
    Case(
        "gold id missing from predictions",
        "gold",
        line(GOLD[0]) + line(GOLD[1]) + line(dict(GOLD[1], id="s3")),
        "id 's3' has no line in the prediction file",
        3,
    ),
    # -- prediction side
    Case(
        "pred latin-1 byte",
        "pred",
        pred_second('{"id": "s2", "predictions": ["d\xeda"]}\n'.encode("latin-1")),
        "not UTF-8 text (byte 0xed",
        2,
    ),
    Case(
        "pred UTF-16 with BOM",
        "pred",
        b"".join(line(p) for p in PRED).decode().encode("utf-16"),
        "not UTF-8 text (byte 0xff",
        1,
    ),
    Case("pred random bytes", "pred", pred_second(b"\x00\xfe\xc3\x28\n"), "not UTF-8 text", 2),
    Case(
        "pred deep nesting",
        "pred",
        pred_second(b'{"id": "s2", "predictions": ' + DEEP + b"}\n"),
        "nested too deeply",
        2,
    ),
    Case(
        "pred 5000-digit integer",
        "pred",
        pred_second(b'{"id": "s2", "predictions": [], "n": ' + BIG_INT + b"}\n"),
        "5000 digits",
        2,
    ),
    Case("pred NaN", "pred", pred_second(b'{"id": "s2", "predictions": [NaN]}\n'), "NaN is not valid JSON", 2),
    Case("pred 1e400", "pred", pred_second(b'{"id": "s2", "predictions": [], "score": -1e400}\n'), "out of range", 2),
    Case(
        "pred duplicated key",
        "pred",
        pred_second(b'{"id": "s2", "predictions": [], "predictions": ["days"]}\n'),
        "duplicated key 'predictions'",
        2,
    ),
    Case(
        "pred duplicated key in an item",
        "pred",
        pred_items({"text": "days"}).replace(b'"text": "days"', b'"text": "days", "text": "May"'),
        "duplicated key 'text'",
        2,
    ),
    Case("pred invalid JSON", "pred", pred_second(b"{oops\n"), "invalid JSON", 2),
    Case("pred JSON array", "pred", pred_second(["s2", []]), "expected a JSON object, got list", 2),
    Case("pred empty file", "pred", b"", "no records"),
    Case("pred only blank lines", "pred", b"\n\n", "no records"),
    Case(
        "pred blank line between records",
        "pred",
        line(PRED[0]) + b"\n" + line(PRED[1]),
        "blank line inside the file",
        2,
    ),
    Case("pred missing id", "pred", pred_second({"predictions": []}), "missing key(s) id", 2),
    Case("pred missing predictions", "pred", pred_second({"id": "s2"}), "missing key(s) predictions", 2),
    Case("pred id not a string", "pred", pred_second({"id": ["s2"], "predictions": []}), "'id' must be a string", 2),
    Case("pred id null", "pred", pred_second({"id": None, "predictions": []}), "'id' must be a string, got None", 2),
    Case(
        "pred predictions a string",
        "pred",
        pred_second({"id": "s2", "predictions": "days"}),
        "'predictions' must be a list, got str",
        2,
    ),
    Case(
        "pred predictions null",
        "pred",
        pred_second({"id": "s2", "predictions": None}),
        "'predictions' must be a list, got NoneType",
        2,
    ),
    Case(
        "pred predictions an object",
        "pred",
        pred_second({"id": "s2", "predictions": {"text": "days"}}),
        "must be a list, got dict",
        2,
    ),
    Case("pred item a number", "pred", pred_items("days", 7), "predictions[1] must be a string or", 2),
    Case("pred item a boolean", "pred", pred_items(True), "predictions[0] must be a string or", 2),
    Case("pred item null", "pred", pred_items(None), "predictions[0] must be a string or", 2),
    Case("pred item a list", "pred", pred_items(["days"]), "predictions[0] must be a string or", 2),
    Case(
        "pred comp item without text",
        "pred",
        pred_items({"label": "TIMEX"}),
        "predictions[0].text must be a string, got None",
        2,
    ),
    Case(
        "pred comp item text a number",
        "pred",
        pred_items({"text": 3, "label": "TIMEX"}),
        "predictions[0].text must be a string",
        2,
    ),
    Case(
        "pred comp item bad label",
        "pred",
        pred_items({"text": "days", "label": "DATE"}),
        "predictions[0].label 'DATE' is not one of",
        2,
    ),
    Case(
        "pred comp item lower-case label",
        "pred",
        pred_items({"text": "days", "label": "timex"}),
        "label 'timex' is not one of",
        2,
    ),
    Case("pred comp item label a number", "pred", pred_items({"text": "days", "label": 1}), "label 1 is not one of", 2),
    Case(
        "pred duplicated id",
        "pred",
        line(PRED[0]) + line(PRED[1]) + line(PRED[0]),
        "duplicated id 's1' (first on line 1)",
        3,
    ),
    Case(
        "pred id not in gold",
        "pred",
        line(PRED[0]) + line(PRED[1]) + line({"id": "s9", "predictions": []}),
        "id 's9' is not in the gold file",
        3,
    ),
    Case(
        "pred id missing (named on the gold line)",
        "gold",
        None,
        "id 's2' has no line in the prediction file",
        2,
        special="pred lacks s2",
    ),
    # -- the file itself
    Case("gold is a directory", "gold", None, "cannot read file (Is a directory)", special="directory"),
    Case("pred is a directory", "pred", None, "cannot read file (Is a directory)", special="directory"),
    Case("gold missing", "gold", None, "cannot read file (No such file or directory)", special="missing"),
    Case("pred missing", "pred", None, "cannot read file (No such file or directory)", special="missing"),
    Case("gold unreadable", "gold", line(GOLD[0]), "cannot read file (Permission denied)", special="unreadable"),
    Case("pred unreadable", "pred", line(PRED[0]), "cannot read file (Permission denied)", special="unreadable"),
]


def make_files(tmp_path: Path, case: Case) -> tuple[Path, Path]:
    """Write the good gold and prediction files, then put the case's fault in its side."""
    gold, pred = tmp_path / "gold.jsonl", tmp_path / "pred.jsonl"
    gold.write_bytes(b"".join(line(g) for g in GOLD))
    pred.write_bytes(b"".join(line(p) for p in PRED))
    faulty = gold if case.side == "gold" else pred
    if case.special == "pred lacks s2":
        pred.write_bytes(line(PRED[0]))
    elif case.special == "directory":
        faulty.unlink()
        faulty.mkdir()
    elif case.special == "missing":
        faulty.unlink()
    else:
        faulty.write_bytes(case.content)
        if case.special == "unreadable":
            faulty.chmod(0)
            if os.access(faulty, os.R_OK):
                pytest.skip("running as root: a file without permissions is still readable")
    return gold, pred


def assert_one_line_error(err: str, out: str, path: Path, case: Case) -> None:
    assert out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), err
    where = f"{path}:{case.line}: " if case.line is not None else f"{path}: "
    assert where in lines[0], lines[0]
    assert case.message in lines[0], lines[0]


def test_the_scorer_tells_fifty_kinds_of_bad_input_apart(tmp_path, capsys):
    """Each fault gets its own diagnosis (what follows ``path[:line]:``): no one message covers two faults."""
    faults_by_diagnosis: dict[tuple[str, str], set[str]] = {}
    for n, case in enumerate(CASES):
        folder = tmp_path / str(n)
        folder.mkdir()
        try:
            gold, pred = make_files(folder, case)
        except pytest.skip.Exception:  # an unreadable file, when running as root
            continue
        named = gold if case.side == "gold" else pred
        assert score.main(["--gold", str(gold), "--pred", str(pred)]) == 2, case.kind
        err = capsys.readouterr().err
        diagnosis = err.split(str(named), 1)[1].split(": ", 1)[1].replace(str(folder), "DIR")
        faults_by_diagnosis.setdefault((case.side, diagnosis), set()).add(case.message)
    shared = {diagnosis: faults for diagnosis, faults in faults_by_diagnosis.items() if len(faults) > 1}
    assert shared == {}
    assert len(faults_by_diagnosis) >= 50
    assert {side for side, _ in faults_by_diagnosis} == {"gold", "pred"}


@pytest.mark.parametrize("case", CASES, ids=[case.kind for case in CASES])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, case):
    gold, pred = make_files(tmp_path, case)
    named = gold if case.side == "gold" else pred
    assert score.main(["--gold", str(gold), "--pred", str(pred)]) == 2
    assert_one_line_error(*reversed(capsys.readouterr()), named, case)
    good = tmp_path / "good.jsonl"
    good.write_bytes(b"".join(line(p) for p in PRED))
    assert compare.main(["--gold", str(gold), "--pred-a", str(good), "--pred-b", str(pred), "--resamples", "10"]) == 2
    assert_one_line_error(*reversed(capsys.readouterr()), named, case)


@pytest.mark.parametrize(
    "module, options, message",
    [
        ("score", ["--seed", "-1"], "argument --seed: expected an integer from 0 to 4,294,967,295, got '-1'"),
        ("score", ["--seed", "9" * 5000], "argument --seed: expected an integer from 0 to"),
        ("score", ["--bootstrap", "-1"], "argument --bootstrap: expected an integer from 0 to 1,000,000, got '-1'"),
        ("score", ["--bootstrap", "10000000000"], "argument --bootstrap: expected an integer from 0 to 1,000,000"),
        ("score", ["--bootstrap", "1e3"], "argument --bootstrap: expected an integer"),
        ("compare", ["--resamples", "0"], "argument --resamples: expected an integer from 1 to 1,000,000, got '0'"),
        ("compare", ["--resamples", "5000000"], "argument --resamples: expected an integer from 1 to 1,000,000"),
        ("compare", ["--seed", "-1"], "argument --seed: expected an integer from 0 to"),
        ("compare", ["--metric", "f2"], "argument --metric: invalid choice: 'f2'"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(tmp_path, capsys, module, options, message):
    gold = tmp_path / "gold.jsonl"
    gold.write_bytes(b"".join(line(g) for g in GOLD))
    files = ["--pred", str(gold)] if module == "score" else ["--pred-a", str(gold), "--pred-b", str(gold)]
    with pytest.raises(SystemExit) as info:
        {"score": score, "compare": compare}[module].main(["--gold", str(gold), *files, *options])
    assert info.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and message in err


def write_large_gold(path: Path, n: int) -> None:
    record = GOLD[1]
    path.write_bytes(b"".join(line(dict(record, id=f"r{i}")) for i in range(n)))


def test_bootstrap_too_large_for_memory_is_refused_before_resampling(tmp_path, capsys):
    gold = tmp_path / "gold.jsonl"
    write_large_gold(gold, 400)
    pred = tmp_path / "pred.jsonl"
    pred.write_bytes(b"".join(line({"id": f"r{i}", "predictions": []}) for i in range(400)))
    assert score.main(["--gold", str(gold), "--pred", str(pred), "--bootstrap", "1000000"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert "--bootstrap 1,000,000 on 400 instances needs about 6.0 GiB (limit 2 GiB); use at most 335,544" in err


# -- end to end: real processes, where an unhandled error would print a traceback


def run_module(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO_ROOT, capture_output=True, timeout=120)


SUBPROCESS_CASES = [
    case
    for case in CASES
    if case.kind
    in (
        "gold UTF-16 with BOM",
        "pred random bytes",
        "gold deep nesting",
        "gold 5000-digit start",
        "pred NaN",
        "gold span listed twice",
        "pred is a directory",
    )
]


@pytest.mark.parametrize("case", SUBPROCESS_CASES, ids=[case.kind for case in SUBPROCESS_CASES])
def test_subprocess_score_prints_one_line_and_exits_2(tmp_path, case):
    gold, pred = make_files(tmp_path, case)
    done = run_module("src.score", "--gold", str(gold), "--pred", str(pred))
    assert done.returncode == 2
    assert_one_line_error(done.stderr.decode(), done.stdout.decode(), gold if case.side == "gold" else pred, case)


def test_subprocess_compare_bad_seed_and_memory(tmp_path):
    gold = tmp_path / "gold.jsonl"
    write_large_gold(gold, 400)
    pred = tmp_path / "pred.jsonl"
    pred.write_bytes(b"".join(line({"id": f"r{i}", "predictions": ["days"]}) for i in range(400)))
    done = run_module("src.compare", "--gold", str(gold), "--pred-a", str(pred), "--pred-b", str(pred), "--seed", "-1")
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr.decode().count("\n") == 1 and b"Traceback" not in done.stderr
    done = run_module("src.score", "--gold", str(gold), "--pred", str(pred), "--bootstrap", "1000000")
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr.decode().count("\n") == 1 and b"needs about 6.0 GiB" in done.stderr


def test_closed_stdout_exits_quietly_with_141(tmp_path):
    """``python -m src.score ... | head -c 10``: the reader leaves; no traceback, exit 141 (128 + SIGPIPE)."""
    gold, pred = tmp_path / "gold.jsonl", tmp_path / "pred.jsonl"
    gold.write_bytes(b"".join(line(g) for g in GOLD))
    pred.write_bytes(b"".join(line(p) for p in PRED))
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody will read: the first write fails with EPIPE
    try:
        done = subprocess.run(
            [sys.executable, "-m", "src.score", "--gold", str(gold), "--pred", str(pred)],
            cwd=REPO_ROOT,
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 141
    assert done.stderr == b""
    shell = subprocess.run(
        f"set -o pipefail; {sys.executable} -m src.compare --gold {gold} --pred-a {pred} --pred-b {pred} "
        "--resamples 50 | head -c 1",
        shell=True,
        executable="/bin/bash",
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=120,
    )
    assert shell.stdout == b"{" and b"Traceback" not in shell.stderr
    assert shell.returncode in (0, 141)  # 0 when the whole report fit in the pipe before head left
