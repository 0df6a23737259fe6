"""A run's key (src/tracking/keys.py): the same configuration, code and data give the same key in any
folder and at any commit; anything that changes the result changes it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from src.tracking.code_closure import code_deps
from src.tracking.keys import code_version, run_key

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
        ["git", "ls-files", "-co", "--exclude-standard", "src", "conf"], cwd=ROOT, capture_output=True, text=True
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
