"""The DVC graph declares what each stage really reads: its code (every module its command
imports, directly or not) and only the params keys it uses.

A stage whose deps miss a module it imports would not re-run when that module changes
(a silently stale result); a dep on code it never imports re-runs it for nothing.
"""

from __future__ import annotations

import re

import pytest
import yaml

from src import study
from src.tracking.code_closure import ENVIRONMENT_FILES, ROOT, closure, command_deps


def stages() -> list[tuple[str, dict]]:
    spec = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))
    out = []
    for name, stage in spec["stages"].items():
        body = stage.get("do", stage)
        out.append((name, body))
    return out


@pytest.mark.parametrize("name,stage", stages(), ids=[name for name, _ in stages()])
def test_stage_code_deps_are_exactly_what_its_command_imports(name: str, stage: dict):
    needed = set(command_deps(stage["cmd"]))
    declared = {
        d for d in (stage.get("deps") or []) if isinstance(d, str) and (d.startswith("src") or d in ENVIRONMENT_FILES)
    }
    missing = sorted(needed - declared)
    extra = sorted(declared - needed)
    assert not missing, f"{name}: deps miss modules its command imports: {missing}"
    assert not extra, f"{name}: deps name code its command never imports: {extra}"


@pytest.mark.parametrize("name,stage", stages(), ids=[name for name, _ in stages()])
def test_stage_params_are_keys_that_exist(name: str, stage: dict):
    params = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    sweep = yaml.safe_load((ROOT / "sweep.yaml").read_text(encoding="utf-8"))
    config = yaml.safe_load((ROOT / "conf" / "config.yaml").read_text(encoding="utf-8"))
    for entry in stage.get("params") or []:
        files = entry.items() if isinstance(entry, dict) else [("params.yaml", [entry])]
        for file, keys in files:
            source = {"params.yaml": params, "sweep.yaml": sweep, "conf/config.yaml": config}[file]
            for key in keys:
                node = source
                for part in key.split("."):
                    assert isinstance(node, dict) and part in node, f"{name}: {file} has no key {key}"
                    node = node[part]


@pytest.mark.parametrize("name,stage", stages(), ids=[name for name, _ in stages()])
def test_a_stage_command_passes_paths_and_names_only(name: str, stage: dict):
    """No setting is templated into a command (the module reads it through src.core.settings),
    so a hand run of the command is the stage and DVC never writes a null as the word None."""
    templated = set(re.findall(r"\$\{([^}]+)\}", stage["cmd"]))
    assert {value for value in templated if not value.startswith("item")} == set(), name


def test_the_run_stage_tracks_every_profile_key_its_runs_read():
    """The run@ stages are sweep.models x sweep.strategies, and each key of the profile that
    src.config.profile turns into an override is a param of the stage (a change re-runs it)."""
    from src.config.profile import profile_overrides
    from src.core.settings import load_sweep

    run = dict(stages())["run"]
    assert run["matrix"] == {"model": "${sweep.models}", "strategy": "${sweep.strategies}"}
    profile = load_sweep(ROOT / "sweep.yaml")
    tracked = {key for entry in run["params"] if isinstance(entry, dict) for key in entry.get("sweep.yaml", [])}
    read = set()
    for key in profile.model_fields:  # a key is read if changing it changes the overrides
        other = profile.model_copy(update={key: "<changed>"})
        if profile_overrides(other, "sweep.yaml") != profile_overrides(profile, "sweep.yaml"):
            read.add(f"sweep.{key}")
    assert read and read <= tracked, sorted(read - tracked)


def test_closure_follows_function_level_imports():
    files = {p.relative_to(ROOT).as_posix() for p in closure("src.run")}
    assert "src/backends/cache.py" in files  # imported inside build_backend
    assert "src/tracking/evaluation.py" in files and "src/study.py" in files


def test_the_stage_lists_are_the_vocabulary():
    """dvc.yaml iterates params.yaml's ``study`` lists; they must say what src/study.py says, so that
    a new derived dataset or tagger task is one vocabulary entry (plus its params line)."""
    listed = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))["study"]
    assert listed["token_classifier_tasks"] == list(study.TOKEN_CLASSIFIER_TASKS)
    assert listed["derived_tasks"] == {name: list(study.DATASETS[name].tasks) for name in study.DERIVED_DATASETS}


def test_the_task_stages_iterate_the_vocabulary_lists():
    spec = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    assert spec["finetune"]["matrix"]["task"] == "${study.token_classifier_tasks}"
    for name in study.DERIVED_DATASETS:
        assert spec[name]["foreach"] == f"${{study.derived_tasks.{name}}}", name


def test_stage_commands_pass_no_setting_of_params_yaml():
    """Settings are read by the stage's module itself: a command templating a params value
    (other than a path or the item) would be a second place for it."""
    for name in study.DERIVED_DATASETS:
        cmd = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"][name]["do"]["cmd"]
        assert "${derive." not in cmd and "${seed}" not in cmd and "${sweep." not in cmd, name
