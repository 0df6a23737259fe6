"""The answers a pipeline stage used, kept as that stage's own DVC output so they travel.

The response cache (:mod:`src.backends.cache`, ``.cache/generations/``) is this machine's: it is
in no DVC output, so a clone that pulled the study would buy every answer again on a ``dvc repro
--force`` or a code change. A stage that generates (``run@``, ``adv_p@``) therefore also writes
every answer it used, bought now or found in the cache, to its answers folder
(``answers/run/{model}-{strategy}/``, ``answers/adv_p/{task}/``), a ``persist: true`` output in
``dvc.yaml`` named by the environment variable :data:`ANSWERS_ENV` in the stage's command:

* one file per answer, named by the sha256 of its bytes (content-addressed: DVC stores and pushes
  a folder file by file, so ``dvc push`` moves only answers the remote lacks, and two colleagues'
  folders never collide on a name);
* the bytes are the canonical JSON of what the answer is (request fields, text, usage, how it
  ended, who served it); nothing of when or where it was bought (no time, latency or the
  llama.cpp prefix reuse), so the same answers give the same bytes and ``dvc.lock`` entry;
* before the stage generates, the response cache reads the folder (:meth:`StageAnswers.read`:
  every file checked against the hash in its name; one that does not match is not used, with one
  warning naming it; two files answering one request differently are an error naming both), copies each answer into the cache (a pulled answer replaces a different
  local one: the study's answer is the one its lock was written with) and empties the folder; the
  run writes back exactly the answers it uses (:meth:`StageAnswers.record`). ``persist: true``
  keeps the folder in place while DVC re-runs the stage (``--force`` included), so the pulled
  answers are there to seed from.

Only answers the cache stores travel (deterministic requests): what the cache does not keep
(sampled answers, failures) is asked for again. docs/pipeline.md#the-answers-travel.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from src.backends.cache_entries import cache_key, canonical_json, entry_problem
from src.core.digest import digest
from src.core.errors import ConfigError
from src.durable import replace_durably

logger = logging.getLogger(__name__)

#: The environment variable a stage's command sets to its answers folder (``dvc.yaml``).
ANSWERS_ENV = "TEMPGEN_ANSWERS"
#: Usage figures that describe how this machine computed an answer, not the answer: left out.
MACHINE_USAGE = frozenset({"prompt_tokens_reused"})
#: The fields an answer file holds (``refusal`` only where the model refused).
ANSWER_FIELDS = ("fields", "text", "usage", "finish_reason", "served", "refusal")


def portable(entry: dict) -> dict:
    """The answer of a cache entry, without this machine's history (time, latency, prefix reuse)."""
    answer = {name: entry.get(name) for name in ANSWER_FIELDS if name != "refusal"}
    answer["usage"] = {k: v for k, v in sorted((entry.get("usage") or {}).items()) if k not in MACHINE_USAGE}
    answer["served"] = dict(entry.get("served") or {})
    if entry.get("refusal") is not None:
        answer["refusal"] = entry["refusal"]
    return json.loads(canonical_json(answer))


def answer_bytes(answer: dict) -> bytes:
    """The file's bytes: canonical JSON (sorted keys, ASCII) and a newline."""
    return canonical_json(answer).encode("ascii") + b"\n"


def answer_name(data: bytes) -> str:
    """The file name of an answer: the sha256 of its bytes."""
    return digest(data) + ".json"


def from_environment() -> StageAnswers | None:
    """The stage's answers folder when its command set :data:`ANSWERS_ENV`, else None (a hand run)."""
    folder = os.environ.get(ANSWERS_ENV, "").strip()
    return StageAnswers(Path(folder)) if folder else None


class StageAnswers:
    """One stage's answers folder: read (checked) before the stage runs, rewritten as it runs."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.written: set[str] = set()

    def __repr__(self) -> str:
        return f"StageAnswers({str(self.folder)!r})"

    def read(self) -> dict[str, dict]:
        """Every usable answer in the folder by its cache key; a file whose bytes do not match the
        hash in its name, or that is no answer, is left out with one warning naming it."""
        answers: dict[str, dict] = {}
        files: dict[str, Path] = {}
        for path in sorted(self.folder.glob("*.json")) if self.folder.is_dir() else []:
            data = path.read_bytes()
            if answer_name(data) != path.name:
                logger.warning("ignoring answer %s: its bytes do not match the checksum in its name", path)
                continue
            try:
                answer = json.loads(data)
            except ValueError as error:
                logger.warning("ignoring answer %s: not JSON (%s)", path, error)
                continue
            problem = entry_problem(answer)
            if problem:
                logger.warning("ignoring answer %s: %s", path, problem)
                continue
            key = cache_key(answer["fields"])
            if key in answers and answers[key] != answer:
                raise ConfigError(
                    f"answers {files[key]} and {path} answer the same request differently (two colleagues' "
                    "runs merged into one folder?): keep the one the study's lock was written with and delete the other"
                )
            answers[key], files[key] = answer, path
        return answers

    def clear(self) -> None:
        """Empty the folder (its answers are in the response cache by now) for the run to refill."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for path in self.folder.iterdir():
            if path.is_file():
                path.unlink()
        self.written.clear()

    def record(self, entry: dict) -> None:
        """Write the answer of a cache ``entry`` the run used (once; atomically)."""
        data = answer_bytes(portable(entry))
        name = answer_name(data)
        if name in self.written:
            return
        replace_durably(self.folder / name, data)
        self.written.add(name)
