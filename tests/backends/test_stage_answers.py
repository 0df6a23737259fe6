"""A stage's answers folder (src/backends/stage_answers.py): the answers a stage used travel as its
DVC output, come back checked, and a re-run from them sends nothing and writes the same bytes.

The oracle is the HTTP server's own request counter, and the files' names are checked with
hashlib directly (not the module's helper).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from src.backends.base import Backend, GenerationResult
from src.backends.cache import CachedBackend, ResponseCache, cache_key, cache_key_fields
from src.backends.openai_backend import OpenAIBackend
from src.backends.stage_answers import ANSWERS_ENV, StageAnswers
from src.core.errors import ConfigError
from src.core.requests import ChatRequest
from src.tracking.code_closure import command_deps
from tests.helpers.openai_server import FakeOpenAIServer
from tests.helpers.paths import REPO_ROOT
from tests.helpers.smoke_project import pipeline_env

PROMPTS = ["first", "second", "third"]


def requests(prompts=PROMPTS) -> list[ChatRequest]:
    return [ChatRequest((("user", text),), request_id=f"id-{text}") for text in prompts]


def stage_backend(server, cache: Path, answers: Path) -> CachedBackend:
    backend = OpenAIBackend(model_id="m", base_url=server.base_url, max_concurrency=2, api_key_env=None)
    return CachedBackend(backend, ResponseCache(cache, StageAnswers(answers)))


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def test_a_stage_keeps_every_answer_it_used_under_the_hash_of_its_bytes(tmp_path):
    with FakeOpenAIServer(latency_s=0.01) as server:
        first = stage_backend(server, tmp_path / "cache", tmp_path / "answers").generate(requests())
        assert server.request_count == 3
        files = folder_bytes(tmp_path / "answers")
        assert len(files) == 3
        for name, data in files.items():
            assert name == hashlib.sha256(data).hexdigest() + ".json"
            answer = json.loads(data)
            assert set(answer) == {"fields", "text", "usage", "finish_reason", "served"}  # no time, no latency
        assert sorted(json.loads(d)["text"] for d in files.values()) == sorted(r.text for r in first)

        # a hit is an answer the stage used too: a second stage on the same cache keeps it
        hits = stage_backend(server, tmp_path / "cache", tmp_path / "other").generate(requests(PROMPTS[:2]))
        assert server.request_count == 3 and all(r.cached for r in hits)
        assert len(folder_bytes(tmp_path / "other")) == 2


def test_a_clone_with_the_folder_and_no_cache_sends_nothing_and_writes_the_same_bytes(tmp_path):
    with FakeOpenAIServer(latency_s=0.01) as server:
        original = stage_backend(server, tmp_path / "cache", tmp_path / "answers").generate(requests())
        pulled = tmp_path / "clone/answers"
        shutil.copytree(tmp_path / "answers", pulled)
        again = stage_backend(server, tmp_path / "clone/cache", pulled).generate(requests())
        assert server.request_count == 3  # nothing more reached the server
        assert [r.text for r in again] == [r.text for r in original] and all(r.cached for r in again)
        assert folder_bytes(pulled) == folder_bytes(tmp_path / "answers")


def test_answers_no_longer_used_leave_the_folder(tmp_path):
    with FakeOpenAIServer() as server:
        stage_backend(server, tmp_path / "cache", tmp_path / "answers").generate(requests())
        stage_backend(server, tmp_path / "cache", tmp_path / "answers").generate(requests(PROMPTS[:2]))
        texts = sorted(json.loads(d)["text"] for d in folder_bytes(tmp_path / "answers").values())
        assert texts == sorted(json.dumps([p]) for p in PROMPTS[:2])


def test_an_answer_that_does_not_match_its_checksum_is_not_used(tmp_path, caplog):
    with FakeOpenAIServer() as server:
        stage_backend(server, tmp_path / "cache", tmp_path / "answers").generate(requests())
        pulled = tmp_path / "clone/answers"
        shutil.copytree(tmp_path / "answers", pulled)
        [edited] = [p for p in pulled.iterdir() if "second" in p.read_text()]
        edited.write_text(edited.read_text().replace("second", "forged"))
        with caplog.at_level(logging.WARNING):
            results = stage_backend(server, tmp_path / "clone/cache", pulled).generate(requests())
        assert server.request_count == 4  # only the forged answer was asked for again
        assert [r.text for r in results] == [json.dumps([p]) for p in PROMPTS]
        warned = [r.getMessage() for r in caplog.records if str(edited) in r.getMessage()]
        assert len(warned) == 1 and "checksum" in warned[0]
        assert not any("forged" in p.read_text() for p in pulled.iterdir())


class LocalEngine(Backend):
    """A local engine's answers: usage with its machine-dependent prefix reuse."""

    name = "local"
    model_id = "m"

    def __init__(self, text: str) -> None:
        self.text = text
        self.sent = 0

    def generate(self, batch, progress=None):
        self.sent += len(batch)
        usage = {"prompt_tokens": 5, "completion_tokens": 2, "prompt_tokens_reused": self.sent}
        return [GenerationResult(r, self.text, usage=usage, latency_s=0.3, finish_reason="stop") for r in batch]


def test_the_stage_answer_replaces_a_different_local_one_and_no_machine_figure_travels(tmp_path, caplog):
    ours = LocalEngine("the study's answer")
    CachedBackend(ours, ResponseCache(tmp_path / "colleague", StageAnswers(tmp_path / "answers"))).generate(requests())
    [data] = [json.loads(p.read_bytes()) for p in (tmp_path / "answers").iterdir() if "first" in p.read_text()]
    assert data["usage"] == {"completion_tokens": 2, "prompt_tokens": 5}
    mine = LocalEngine("this machine's answer")
    CachedBackend(mine, ResponseCache(tmp_path / "mine")).generate(requests())  # a hand run: no folder
    with caplog.at_level(logging.WARNING):
        results = CachedBackend(
            LocalEngine("unused"), ResponseCache(tmp_path / "mine", StageAnswers(tmp_path / "answers"))
        ).generate(requests())
    assert {r.text for r in results} == {"the study's answer"} and all(r.cached for r in results)
    assert any("3 answer(s) of the response cache differ" in r.getMessage() for r in caplog.records)
    key = cache_key(cache_key_fields("local", "m", {}, requests()[0]))
    assert ResponseCache(tmp_path / "mine").get(key)["text"] == "the study's answer"


def test_two_colleagues_answers_to_one_request_that_differ_are_an_error_naming_both_files(tmp_path):
    """Issue 48: the file that sorted last won, silently. Both folders merged into one (a ``dvc pull``
    over a colleague's run of the same stage): the request has two answers, and the read names both."""
    CachedBackend(LocalEngine("mine"), ResponseCache(tmp_path / "a", StageAnswers(tmp_path / "answers"))).generate(
        requests(["first"])
    )
    colleague = tmp_path / "colleague"
    CachedBackend(LocalEngine("theirs"), ResponseCache(tmp_path / "b", StageAnswers(colleague))).generate(
        requests(["first"])
    )
    [theirs] = list(colleague.iterdir())
    shutil.copy(theirs, tmp_path / "answers" / theirs.name)
    files = sorted(str(p) for p in (tmp_path / "answers").iterdir())
    with pytest.raises(ConfigError) as conflict:
        StageAnswers(tmp_path / "answers").read()
    assert all(name in str(conflict.value) for name in files) and "differently" in str(conflict.value)
    same = tmp_path / "same"  # one answer twice (the same bytes) is no conflict: one file, by its hash
    CachedBackend(LocalEngine("mine"), ResponseCache(tmp_path / "c", StageAnswers(same))).generate(requests(["first"]))
    assert len(StageAnswers(same).read()) == 1


def test_the_stage_command_names_the_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(ANSWERS_ENV, str(tmp_path / "answers/run/m-I"))
    assert ResponseCache(tmp_path / "cache").answers.folder == tmp_path / "answers/run/m-I"
    monkeypatch.delenv(ANSWERS_ENV)
    assert ResponseCache(tmp_path / "cache").answers is None  # a hand run keeps no folder


def _stages() -> dict[str, dict]:
    """dvc.yaml's stage templates (a foreach/matrix stage's ``do`` body)."""
    stages = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    return {name: stage.get("do", stage) for name, stage in stages.items()}


def test_every_stage_that_generates_keeps_its_answers_as_a_persistent_output():
    """A stage whose code uses the response cache names its answers folder in its command, and
    declares that folder as its own output with ``persist: true`` (kept for the re-run to seed from)."""
    generating = []
    for name, stage in _stages().items():
        deps = command_deps(stage["cmd"])
        if "src/backends" not in deps and "src/backends/cache.py" not in deps:  # the package, or the file
            continue
        generating.append(name)
        match = re.search(rf"{ANSWERS_ENV}=(\S+)", stage["cmd"])
        assert match, f"{name}: its command sets no {ANSWERS_ENV}"
        outs = {next(iter(o)): o[next(iter(o))] for o in stage["outs"] if isinstance(o, dict)}
        assert outs.get(match.group(1)) == {"persist": True}, f"{name}: {match.group(1)} is no persist output"
    assert sorted(generating) == ["adv_p", "run"]


@pytest.mark.parametrize("edit", ["truncate", "not json"])
def test_a_damaged_answer_file_is_skipped_with_one_line(tmp_path, caplog, edit):
    folder = tmp_path / "answers"
    folder.mkdir()
    data = b"{broken" if edit == "not json" else b""
    (folder / (hashlib.sha256(data).hexdigest() + ".json")).write_bytes(data)
    with caplog.at_level(logging.WARNING):
        assert StageAnswers(folder).read() == {}
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


GENERATE = """
import sys
from src.core.requests import ChatRequest
from src.backends.cache import CachedBackend, ResponseCache
from src.backends.openai_backend import OpenAIBackend

backend = OpenAIBackend(model_id="m", base_url=sys.argv[1], api_key_env=None)
cached = CachedBackend(backend, ResponseCache(".cache/generations"))
results = cached.generate([ChatRequest((("user", p),), request_id=p) for p in ("one", "two", "three")])
open("out.txt", "w").write("\\n".join(r.text for r in results) + "\\n")
"""


@pytest.mark.slow
def test_push_clone_pull_and_a_forced_repro_send_nothing_and_keep_the_lock(tmp_path):
    """The round trip through DVC itself on a one-stage project: push, clone, pull, ``repro --force``."""
    env = {**pipeline_env(), "PYTHONPATH": str(REPO_ROOT)}

    def run(where: Path, *args: str) -> subprocess.CompletedProcess:
        done = subprocess.run(list(args), cwd=where, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    project, clone = tmp_path / "project", tmp_path / "clone"
    project.mkdir()
    with FakeOpenAIServer() as server:
        run(project, "git", "init", "-q")
        run(project, sys.executable, "-m", "dvc", "init", "-q")
        (project / "generate.py").write_text(GENERATE)
        (project / ".gitignore").write_text(".cache/\n")
        stage = {
            "cmd": f"{ANSWERS_ENV}=answers/ask python generate.py {server.base_url}",
            "deps": ["generate.py"],
            "outs": ["out.txt", {"answers/ask": {"persist": True}}],
        }
        (project / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"ask": stage}}))
        run(project, sys.executable, "-m", "dvc", "repro")
        assert server.request_count == 3
        run(project, sys.executable, "-m", "dvc", "remote", "add", "-d", "team", str(tmp_path / "remote"))
        run(project, sys.executable, "-m", "dvc", "push")
        run(project, "git", "add", "-A")
        run(project, "git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "study")
        run(tmp_path, "git", "clone", "-q", str(project), str(clone))
        run(clone, sys.executable, "-m", "dvc", "pull")
        assert not (clone / ".cache").exists()
        forced = run(clone, sys.executable, "-m", "dvc", "repro", "--force")
        assert "Running stage 'ask'" in forced.stdout
        assert server.request_count == 3  # the pulled answers, not the server
        assert (clone / "dvc.lock").read_bytes() == (project / "dvc.lock").read_bytes()
        assert (clone / "out.txt").read_bytes() == (project / "out.txt").read_bytes()
        again = run(clone, sys.executable, "-m", "dvc", "push")
        assert "Everything is up to date" in again.stdout + again.stderr
