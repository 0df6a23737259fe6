"""docs/extending.md, followed step by step in a temporary copy of the project.

The test adds what the page adds (a derived dataset ``toy``, a reasoning letter ``C``, a
scorer ``exact_string``) with the page's own snippets (each must appear verbatim in the
page), builds the toy set with its module, runs one configuration with ``python -m src.run``
against the loopback OpenAI-compatible server and the analysis on its summary, and checks
that the dataset is scored and reported, that the new letter's text is in the prompts, and
the scorer's value against a hand count. It is the page's proof: change one, change both.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from src.data.schema import Record, Span, write_records
from src.tracking.history import read_history
from tests.helpers.openai_server import FakeOpenAIServer, last_user_message

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "extending.md"

# --- the page's snippets (each: the file, the line it goes after, the text) ------------------

DATASET_ANCHOR = '    "len": Dataset("len", "structural", documents=True),\n'
DATASET_ENTRY = '    "toy": Dataset("toy", "robustness", derived=True),\n'

TOY_BUILDER = '''"""A toy derived set: each base sentence with one word appended after it (gold spans unchanged)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from src.derive.alignment import derived_record
from src.derive.outputs import add_base_arguments, read_base, write_derived
from src.derive.settings import resolve


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="src.derive.toy", description=__doc__)
    add_base_arguments(parser, "where to write the toy records")
    parser.add_argument("--suffix", default=None, help="the appended word (default: params derive.toy.suffix)")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = resolve(parser, parser.parse_args(argv), "toy")  # seed, limit and derive.toy from the params files
    records = read_base(args)
    derived = [derived_record(r, f"{r.text} {args.suffix}", r.spans, {"original_text": r.text}) for r in records]
    write_derived(args, "toy", records, derived, {"instances": len(derived), "seed": args.seed, "limit": args.limit})


if __name__ == "__main__":
    main()
'''

PARAMS_STUDY_ANCHOR = "    voc: [timex, eventx]\n"
PARAMS_STUDY_ENTRY = "    toy: [timex, eventx]\n"
PARAMS_DERIVE_ANCHOR = "derive:\n"
PARAMS_DERIVE_BLOCK = "  toy:\n    suffix: indeed\n"

DVC_ANCHOR = "  adv:\n    foreach: ${study.derived_tasks.adv}\n"
DVC_STAGE = """  toy:
    foreach: ${study.derived_tasks.toy}
    do:
      cmd: >-
        python -m src.derive.toy --input data/prepared/${item}/base.jsonl
        --output data/derived/${item}/toy.jsonl --stats data/derived/${item}/toy.stats.json
      deps:
        - data/prepared/${item}/base.jsonl
      params:
        - seed
        - derive.toy
        - sweep.yaml:
            - sweep.derive_limit
      outs:
        - data/derived/${item}/toy.jsonl
      metrics:
        - data/derived/${item}/toy.stats.json

"""

LETTER_ANCHOR = "REASONING_PARTS: tuple[ReasoningPart, ...] = (\n"
LETTER_ENTRY = '    ReasoningPart("C", "contrastive"),\n'
TEMPLATE_ANCHOR = "REASONING_TEMPLATES: dict[str, dict[str, str] | str] = {\n"
TEMPLATE_ENTRY = """    "contrastive": (
        "Contrastive reasoning: for each candidate, think of a similar phrase that is not one of the "
        "{targets}, and keep the candidate only if it differs from it."
    ),
"""

SCORER = """

@register_scorer("exact_string", "exact string", "a span counts when its string equals one of the other side")
def exact_string(record, predictions, lowercase):
    gold = [span.text for span in record.spans]
    predicted = [prediction.text for prediction in predictions]
    p_sum = sum(text in gold for text in predicted)
    r_sum = sum(text in predicted for text in gold)
    return p_sum, r_sum, len(predicted), len(gold)
"""
SCORER_IMPORT = "from src.scoring.scorer_registry import register_scorer\n"

PARAMS_ANALYSIS_ANCHOR = (
    "analysis:                     # src/analyze.py's defaults (its flags override them; a profile sets resamples)\n"
)
PARAMS_ANALYSIS_ENTRY = "  examples: 5                 # instances shown per error category in the report\n"
SETTINGS_ANCHOR = (
    '    flip_threshold: float = Field(ge=0, lt=1, description="a per-instance F1 drop above this is a flip")\n'
)
SETTINGS_ENTRY = '    examples: int = Field(ge=0, description="instances shown per error category in the report")\n'

SNIPPETS = (
    PARAMS_ANALYSIS_ENTRY,
    SETTINGS_ENTRY,
    DATASET_ENTRY,
    TOY_BUILDER,
    PARAMS_STUDY_ENTRY,
    PARAMS_DERIVE_BLOCK,
    DVC_STAGE.rstrip("\n") + "\n",
    LETTER_ENTRY,
    TEMPLATE_ENTRY,
    SCORER.strip("\n") + "\n",
    SCORER_IMPORT,
)

# --- the toy data and the model's answers ----------------------------------------------------


def _record(rid: str, text: str, spans: list[str]) -> Record:
    return Record(rid, rid.split("#")[0], text, [_span(text, s) for s in spans], "test")


def _span(text: str, string: str) -> Span:
    start = text.index(string)
    return Span(start, start + len(string), string, "TIMEX")


BASE = [
    _record("d1#s0", "The meeting was held on Friday .", ["Friday"]),
    _record("d2#s0", "Sales rose last week and again today .", ["last week", "today"]),
    _record("d3#s0", "He left in 1998 .", ["1998"]),
]
ANSWERS = {  # input sentence (toy: with " indeed") -> the model's answer
    "The meeting was held on Friday .": '["Friday"]',
    "Sales rose last week and again today .": '["last week"]',
    "He left in 1998 .": '["in 1998"]',
}
TEXT_CUE = "Text: "


def _answer(body: dict) -> str:
    last_line = last_user_message(body).rstrip().splitlines()[-1]
    sentence = last_line.removeprefix(TEXT_CUE).removesuffix(" indeed")
    return ANSWERS[sentence]


def _insert_after(path: Path, anchor: str, text: str) -> None:
    content = path.read_text(encoding="utf-8")
    assert content.count(anchor) == 1, f"{path.name}: the page's anchor {anchor!r} is not there once"
    path.write_text(content.replace(anchor, anchor + text), encoding="utf-8")


def _insert_before(path: Path, anchor: str, text: str) -> None:
    content = path.read_text(encoding="utf-8")
    assert content.count(anchor) == 1, f"{path.name}: the page's anchor {anchor!r} is not there once"
    path.write_text(content.replace(anchor, text + anchor), encoding="utf-8")


def _python(copy: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"{' '.join(args)}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


@pytest.fixture()
def copy(tmp_path: Path) -> Path:
    """The project's code, configs and params files, with tiny prepared data."""
    repo = tmp_path / "repo"
    for name in ("src", "conf", "scripts"):
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("params.yaml", "sweep.yaml", "dvc.yaml", "pyproject.toml", "requirements.lock"):
        shutil.copy2(ROOT / name, repo / name)
    (repo / "tests").mkdir()
    for name in ("__init__.py", "conftest.py", "test_dvc_graph.py"):
        shutil.copy2(ROOT / "tests" / name, repo / "tests" / name)
    write_records(repo / "data/prepared/timex/base.jsonl", BASE)
    if not (ROOT / "data/raw/nltk_data").is_dir():
        pytest.skip("src.derive needs data/raw/nltk_data: run `dvc pull data.dvc` (docs/data.md)")
    (repo / "data/raw").symlink_to(ROOT / "data/raw", target_is_directory=True)  # read only
    return repo


def test_every_snippet_the_test_applies_is_on_the_page():
    page = PAGE.read_text(encoding="utf-8")
    missing = [snippet for snippet in SNIPPETS if snippet not in page]
    assert not missing, f"docs/extending.md lacks the snippet(s) the test applies: {missing}"


def test_the_strategy_order_follows_from_the_reasoning_parts():
    from src import study
    from src.prompts.strategy_files import strategy_file_text

    assert study.STRATEGY_ORDER == ("I", "D", "A", "D+I", "A+I", "A+D", "A+D+I")
    letters = (study.ReasoningPart("C", "contrastive"), *study.REASONING_PARTS)
    assert study.strategy_order(letters)[:8] == ("I", "D", "A", "C", "D+I", "A+I", "A+D", "C+I")
    assert len(study.strategy_order(letters)) == 15
    # the written defaults are the committed files' values (the committed files only add comments)
    import yaml

    for name in study.STRATEGY_ORDER:
        committed = yaml.safe_load((ROOT / "conf/strategy" / f"{name}.yaml").read_text(encoding="utf-8"))
        assert yaml.safe_load(strategy_file_text(name)) == committed, name


def test_the_walk_through_adds_a_dataset_a_strategy_and_a_scorer(copy: Path):
    # 1. a dataset: vocabulary entry, builder, params, stage; then the stage's code deps
    _insert_after(copy / "src/study.py", DATASET_ANCHOR, DATASET_ENTRY)
    (copy / "src/derive/toy.py").write_text(TOY_BUILDER, encoding="utf-8")
    _insert_after(copy / "params.yaml", PARAMS_STUDY_ANCHOR, PARAMS_STUDY_ENTRY)
    _insert_after(copy / "params.yaml", PARAMS_DERIVE_ANCHOR, PARAMS_DERIVE_BLOCK)
    _insert_before(copy / "dvc.yaml", DVC_ANCHOR, DVC_STAGE)
    _python(copy, "scripts/stage_deps.py")
    graph = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_dvc_graph.py",
            "-k",
            "toy or vocabulary",
        ],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert graph.returncode == 0 and " passed" in graph.stdout, graph.stdout[-3000:]
    # toy's deps, params and command (paths and names only), the two vocabulary checks
    assert "5 passed" in graph.stdout, graph.stdout[-3000:]
    _python(
        copy,
        "-m",
        "src.derive.toy",
        "--input",
        "data/prepared/timex/base.jsonl",
        "--output",
        "data/derived/timex/toy.jsonl",
        "--stats",
        "data/derived/timex/toy.stats.json",
    )
    built = [json.loads(line) for line in (copy / "data/derived/timex/toy.jsonl").read_text().splitlines()]
    assert [r["text"] for r in built] == [r.text + " indeed" for r in BASE]

    # 2. a strategy letter: vocabulary entry, template part, its strategy files
    _insert_after(copy / "src/study.py", LETTER_ANCHOR, LETTER_ENTRY)
    _insert_after(copy / "src/prompts/templates.py", TEMPLATE_ANCHOR, TEMPLATE_ENTRY)
    written = _python(copy, "-m", "src.prompts.strategy_files").stdout
    assert written.count("wrote ") == 8  # C and its 7 combinations with A, D and I
    assert (copy / "conf/strategy/C+D.yaml").read_text().count("k: 0") == 1

    # 3. a scorer: one registered function
    _insert_after(copy / "src/scoring/custom_scorers.py", '"""\n', "\n" + SCORER_IMPORT)
    with (copy / "src/scoring/custom_scorers.py").open("a", encoding="utf-8") as out:
        out.write(SCORER)

    # the added code is lint- and format-clean as written on the page
    edited = ("src/study.py", "src/derive/toy.py", "src/prompts/templates.py", "src/scoring/custom_scorers.py")
    _python(copy, "-m", "ruff", "check", "--no-cache", *edited)
    _python(copy, "-m", "ruff", "format", "--no-cache", "--check", *edited)

    # one configuration on base and toy, then the analysis
    summary = copy / "summaries/runs/qwen3_moe-C+D.json"
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["OPENROUTER_API_KEY"] = "unused-by-a-loopback-server"
    tracking = f"sqlite:///{copy / 'mlflow.db'}"
    with FakeOpenAIServer(answer=_answer) as server:
        _python(
            copy,
            "-m",
            "src.run",
            "model=qwen3_moe",
            "strategy=C+D",
            "dimension=robustness",
            "tasks=[timex]",
            "datasets=[base,toy]",
            "scoring.variants=[exact_string]",
            "scoring.bootstrap_resamples=50",
            f"model.options.base_url={server.base_url}",
            f"paths.cache={copy / 'cache'}",
            f"mlflow.tracking_uri={tracking}",
            f"summary={summary}",
            f"hydra.run.dir={copy / 'outputs'}",
            env=env,
        )
        prompts = [last_user_message(body) for body in server.bodies]
    assert len(prompts) == 6  # 3 base + 3 toy sentences
    contrastive = "Contrastive reasoning: for each candidate"
    assert all(contrastive in p and p.index(contrastive) < p.index("Deductive reasoning:") for p in prompts)

    scored = json.loads(summary.read_text())
    assert scored["complete"] and scored["strategy"] == "C+D"
    # the paper's LCS F1: Friday 1, last week 1, "in 1998" vs "1998" 1/2: 2.5 of 3 predicted, of 4 gold
    assert scored["metrics"]["timex"]["toy"]["f1"] == pytest.approx(5 / 7, abs=1e-6)
    assert scored["metrics"]["timex"]["base"]["f1"] == pytest.approx(5 / 7, abs=1e-6)

    import mlflow

    client = mlflow.MlflowClient(tracking_uri=tracking)
    metrics = client.get_run(read_history(summary)["run_id"]).data.metrics
    # exact strings: Friday and last week, of 3 predicted and 4 gold spans: P 2/3, R 1/2, F1 4/7
    assert metrics["timex.toy.exact_string.precision"] == pytest.approx(2 / 3)
    assert metrics["timex.toy.exact_string.recall"] == pytest.approx(1 / 2)
    assert metrics["timex.toy.exact_string.f1"] == pytest.approx(4 / 7)

    _python(
        copy,
        "-m",
        "src.analyze",
        "--tracking-uri",
        tracking,
        "--summaries",
        "summaries",
        "--out",
        "reports",
        "--resamples",
        "50",
        env=env,
    )
    tables = copy / "reports/tables"
    results = {row["configuration"]: row for row in csv.DictReader((tables / "results_timex.csv").open())}
    assert results["qwen3_moe-C+D"]["timex/toy"].startswith("0.714 [")  # LCS F1 5/7 and its interval
    scorers = {row["dataset"]: row for row in csv.DictReader((tables / "scorers.csv").open())}
    assert float(scorers["toy"]["exact_string"]) == pytest.approx(4 / 7)
    assert float(scorers["toy"]["paper"]) == pytest.approx(5 / 7)
    assert (tables / "dataset_timex_toy.csv").exists()
    assert "timex/toy" in (copy / "reports/report.md").read_text()


def _analysis_error(copy: Path) -> str:
    """The analysis stage's last stderr line in the copy, which must stop with exit code 2."""
    done = subprocess.run(
        [sys.executable, "-m", "src", "analyze", "--out", "reports"],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    return done.stderr.strip().splitlines()[-1]


def test_the_walk_through_adds_a_pipeline_setting(copy: Path):
    """Section 5: a params.yaml line and a model field; the layer's own tests judge the two steps."""
    shutil.copy2(ROOT / "tests" / "test_settings.py", copy / "tests" / "test_settings.py")
    check = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_settings.py", "-k", "params_model"]

    _insert_after(copy / "params.yaml", PARAMS_ANALYSIS_ANCHOR, PARAMS_ANALYSIS_ENTRY)
    alone = subprocess.run([sys.executable, *check], cwd=copy, capture_output=True, text=True, timeout=300)
    assert alone.returncode == 1 and "1 failed" in alone.stdout, alone.stdout[-2000:]  # step 1 alone: not yet typed
    assert _analysis_error(copy) == f"error: {copy / 'params.yaml'}: analysis.examples: no such setting"

    _insert_after(copy / "src/core/settings.py", SETTINGS_ANCHOR, SETTINGS_ENTRY)
    _python(copy, "-m", "ruff", "check", "--no-cache", "src/core/settings.py")
    assert "1 passed" in _python(copy, *check).stdout
    read = _python(copy, "-c", "from src.core.settings import load_params; print(load_params().analysis.examples)")
    assert read.stdout.strip() == "5"

    text = (copy / "params.yaml").read_text(encoding="utf-8")
    (copy / "params.yaml").write_text(text.replace("  examples: 5 ", "  examples: five "), encoding="utf-8")
    assert _analysis_error(copy) == (
        f"error: {copy / 'params.yaml'}: analysis.examples: input should be a valid integer, got 'five'"
    )
