"""A run's key (src/tracking/keys.py): the same configuration, code and data give the same key in any
folder and at any commit; anything that changes the result changes it."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from src.report.provenance import Summary, fetch_runs
from src.runs.configure import run_record
from src.runs.offline import load_config
from src.tracking.code_closure import ENVIRONMENT_FILES, code_deps
from src.tracking.history import read_history, write_history
from src.tracking.keys import KEY_TAG, NOT_IN_KEY, code_version, excluded, key_settings, key_value, run_key

ROOT = Path(__file__).resolve().parents[1]
PARAMS = {"seed": 13, "data_version": "raw:a/datasets:b", "code_version": "c0de", "git_commit": "abc-dirty"}


def test_the_key_ignores_history_and_follows_what_was_computed():
    key = run_key("prompted", "m-I", PARAMS)
    assert key == run_key("prompted", "m-I", {**PARAMS, "git_commit": "def"}) == run_key("prompted", "m-I", {
        k: v for k, v in PARAMS.items() if k != "git_commit"
    })  # fmt: skip
    assert len(key) == 16 and int(key, 16) >= 0
    others = [
        run_key("prompted", "m-I", {**PARAMS, "seed": 14}),
        run_key("prompted", "m-I", {**PARAMS, "data_version": "raw:a/datasets:c"}),
        run_key("prompted", "m-I", {**PARAMS, "code_version": "c0df"}),
        run_key("finetuned", "m-I", PARAMS),
        run_key("prompted", "m-D", PARAMS),
    ]
    assert len({key, *others}) == 6


def test_the_code_version_is_the_same_in_another_folder_and_moves_with_the_stage_code(tmp_path: Path):
    """A copy of the source elsewhere has the same code version; an edit inside a stage's imports
    changes that stage's version, an edit outside them does not (as DVC's code deps)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "src", "conf", *ENVIRONMENT_FILES],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.split()
    for relative in listed:
        target = tmp_path / "copy" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((ROOT / relative).read_bytes())
    probe = (
        "from src.tracking.keys import code_version; "
        "print(code_version(), code_version('src.analyze'), code_version('src.finetune.train'))"
    )

    def versions() -> list[str]:
        done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path / "copy", capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.split()

    here = [code_version(), code_version("src.analyze"), code_version("src.finetune.train")]
    assert len(set(here)) == 3
    assert versions() == here
    outside = tmp_path / "copy/src/finetune/train.py"  # imported by the training, not by the analysis
    assert "src/finetune/train.py" not in code_deps("src.analyze")
    outside.write_text(outside.read_text() + "\n# a change\n")
    edited = versions()
    assert edited[1] == here[1] and edited[0] != here[0] and edited[2] != here[2]


PIPELINE = ["model=smollm2_135m", "strategy=A+I", "profile=default", "limit=40", "max_input_words=300"]
#: compositions that between them reach every kind of setting (an API model, a provider, the condition)
COMPOSITIONS = [
    PIPELINE,
    ["model=qwen25_7b", "strategy=D", "provider=openrouter", "condition=study_condition"],
    ["model=qwen25_7b", "strategy=I", "provider=vllm", "+provider.options.extra_headers={X-Team:a}"],
    [*PIPELINE, "+k_selection_output=reports/k.json"],
]


def _flat(value, prefix=""):
    """The test's own walk of a resolved configuration: dotted name -> leaf (a list is a leaf)."""
    if isinstance(value, dict) and value:
        return {k: v for name, inner in value.items() for k, v in _flat(inner, f"{prefix}{name}.").items()}
    return {prefix[:-1]: value}


def test_every_leaf_of_the_resolved_configuration_is_in_the_key_or_excluded_with_a_reason():
    reached = set()
    for overrides in COMPOSITIONS:
        leaves = _flat(load_config(overrides).raw)
        covered = key_settings(load_config(overrides).raw)
        for name, value in leaves.items():
            why = excluded(name)
            if why is None:
                assert covered.get(name, "absent") == value, f"{overrides}: {name} is neither in the key nor excluded"
            else:
                assert name not in covered and len(why) > 20, name
                reached |= {prefix for prefix in NOT_IN_KEY if name == prefix or name.startswith(prefix + ".")}
        for name in ("generation.max_tokens", "generation.max_tokens_document", "scoring.bootstrap_resamples"):
            assert name in covered, name
    assert reached == set(NOT_IN_KEY), f"exclusions that match no setting: {set(NOT_IN_KEY) - reached}"


def _key(*overrides: str) -> str:
    return run_record(load_config([*PIPELINE, *overrides]), []).key


@pytest.mark.parametrize(
    "override",
    [
        "generation.max_tokens=64",
        "generation.max_tokens_document=200",
        "condition=study_condition",
        "scoring.bootstrap_resamples=500",
        "scoring.lowercase=true",
        "model.options.n_ctx=4096",
        "tasks=[timex]",
        "prompt.form=chat",
    ],
)
def test_a_setting_that_changes_an_answer_or_a_number_changes_the_run_key(override):
    assert _key(override) != _key()


@pytest.mark.parametrize(
    "override",
    [
        "paths.cache=/elsewhere/generations",
        "budget.max_cost_usd=1",
        "mlflow.experiment=other",
        "evidence=evidence/runs/x",
        "summary=summaries/runs/x.json",
        "profile=smoke",
    ],
)
def test_where_a_run_is_written_logged_or_capped_leaves_its_key_alone(override):
    assert _key(override) == _key()


def test_no_key_holds_an_absolute_path():
    inside = str(ROOT / "reports")
    assert key_value(inside) == "reports" and key_value("reports") == "reports"
    assert key_value("/tmp/a/report") == key_value("/var/b/report") == "<outside the project>/report"
    assert key_value("C:\\Users\\me\\report") == "<outside the project>/report"
    assert key_value("raw:ab12/datasets:cd34") == "raw:ab12/datasets:cd34"  # not a path
    params = {"resamples": 10, "out": inside}
    assert run_key("analysis", "analysis default", params) == run_key(
        "analysis", "analysis default", {**params, "out": "reports"}
    )
    assert run_key("analysis", "a", {"out": "/tmp/x/report"}) == run_key("analysis", "a", {"out": "/home/y/report"})


def test_a_history_file_of_another_run_is_not_read_as_this_one(tmp_path, caplog):
    summary = tmp_path / "summaries/runs/m-I.json"
    write_history(summary, {"key": "k-old", "run_id": "r-old", "usage": {"sent": 3}})
    assert read_history(summary, "k-old")["run_id"] == "r-old"
    with caplog.at_level(logging.WARNING):
        assert read_history(summary, "k-new") == {}
    [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "k-old" in line and "k-new" in line and "history/runs/m-I.json" in line
    (tmp_path / "history/runs/m-I.json").write_text(json.dumps({"run_id": "r-keyless"}))
    assert read_history(summary, "k-new") == {}  # a history without a key is nobody's


def _keyed_run(key: str, f1: float, wall_time_s: float) -> str:
    import mlflow

    with mlflow.start_run(run_name="m-I") as run:
        mlflow.set_tags({KEY_TAG: key, "kind": "prompted", "model": "m", "strategy": "I"})
        mlflow.log_metrics({"timex.base.f1": f1, "wall_time_s": wall_time_s})
    return run.info.run_id


def test_two_runs_with_one_key_must_agree_and_match_their_summary(tmp_path):
    """The analysis reads a summary's run by its key: two FINISHED runs with that key and other
    metrics are an error naming both; a run whose metrics are not the summary's is one too."""
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = mlflow.create_experiment("keys", artifact_location=(tmp_path / "art").as_uri())
    mlflow.set_experiment("keys")
    client = mlflow.MlflowClient()
    summary = Summary(tmp_path / "m-I.json", "runs/m-I.json", "K", "m", "I", True, "m-I", None, {"timex.base.f1": 0.5})
    first = _keyed_run("K", 0.5, 10.0)
    _keyed_run("K", 0.5, 99.0)  # the same numbers on a slower machine: the same run, for the analysis
    assert [run.info.run_id for run in fetch_runs(client, [summary], experiment, "keys")] != [first]
    other = _keyed_run("K", 0.6, 10.0)
    with pytest.raises(ValueError, match="different metrics") as raised:
        fetch_runs(client, [summary], experiment, "keys")
    assert other in str(raised.value) and "timex.base.f1" in str(raised.value) and "m-I.json" in str(raised.value)
    client.delete_run(other)
    stale = Summary(summary.path, summary.name, "K", "m", "I", True, "m-I", None, {"timex.base.f1": 0.4})
    with pytest.raises(ValueError, match=r"says timex.base.f1 = 0.4, but run \w+ \(key K\) has 0.5"):
        fetch_runs(client, [stale], experiment, "keys")
