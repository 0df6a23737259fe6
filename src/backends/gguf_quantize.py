"""A GGUF re-quantised by llama.cpp's own quantiser, derived once and kept in a local cache.

Why: on a CPU, llama.cpp repacks ``Q4_0`` weights into interleaved blocks that its AVX2 kernels
multiply faster than the ``Q4_1`` the embedded SmolLM2 package ships (one thread, a 600-token
prompt: prompt evaluation 5.00 -> 2.87 ms per token, decoding 10.34 -> 8.70 ms;
``benchmarks/results/requantize.json``). No other copy of the model can be downloaded at run
time, so the faster file is derived from the shipped one.

The derived file is a pure function of the source file, the target type and the llama.cpp build
(checked: two quantisations give the same SHA-256). It lives in ``cache_dir`` beside a sidecar
JSON with both SHA-256 digests; a cached file whose source, llama.cpp version or own digest no
longer match is derived again. Writing goes to a temporary name under a file lock and is renamed
into place, so concurrent runs never read a half-written model.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
from pathlib import Path

from filelock import FileLock

from src.backends.gguf_files import import_llama_cpp
from src.core.digest import file_digest

#: Target types accepted by ``requantize`` (llama.cpp's names) and their ``llama_ftype`` constant names.
QUANT_TYPES = {
    "Q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0",
    "Q4_1": "LLAMA_FTYPE_MOSTLY_Q4_1",
    "Q5_0": "LLAMA_FTYPE_MOSTLY_Q5_0",
    "Q5_1": "LLAMA_FTYPE_MOSTLY_Q5_1",
    "Q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0",
}
DEFAULT_CACHE_DIR = Path(".cache") / "gguf"


def check_quant_type(name: str) -> str:
    """The canonical type name, or a ValueError listing the accepted ones."""
    canonical = str(name).upper()
    if canonical not in QUANT_TYPES:
        raise ValueError(f"requantize: {name!r} is not one of {sorted(QUANT_TYPES)}")
    return canonical


class RequantizedGGUF:
    """``source`` quantised to ``quant_type`` (token embeddings keep the source's type).

    ``path`` is the derived file, ``sha256`` its digest, ``source_sha256`` the source's;
    :meth:`identity` is what a response cache and an MLflow run need to tell these weights apart.
    """

    def __init__(self, source: Path, quant_type: str, cache_dir: Path | str | None = None) -> None:
        self.source = Path(source)
        self.quant_type = check_quant_type(quant_type)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else DEFAULT_CACHE_DIR
        self.source_sha256 = file_digest(self.source)
        stem = self.source.name.removesuffix(".gguf")
        name = f"{stem}.{self.source_sha256[:12]}.{self.quant_type}.gguf"
        self.path = self.cache_dir / name
        self._sidecar = self.path.with_suffix(".json")
        self.sha256 = self._cached_sha256() or self._derive()

    def identity(self) -> dict:
        return {"requantize": self.quant_type, "source_sha256": self.source_sha256, "gguf_sha256": self.sha256}

    def _expected(self) -> dict:
        return {
            "source": self.source.name,
            "source_sha256": self.source_sha256,
            "quant_type": self.quant_type,
            "llama_cpp": import_llama_cpp("requantize").__version__,
        }

    def _cached_sha256(self) -> str | None:
        """The cached file's digest when it is the derivation of this source by this llama.cpp."""
        try:
            recorded = json.loads(self._sidecar.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(recorded, dict) or any(recorded.get(k) != v for k, v in self._expected().items()):
            return None
        if not self.path.is_file() or file_digest(self.path) != recorded.get("sha256"):
            return None
        return recorded["sha256"]

    def _derive(self) -> str:
        llama_cpp = import_llama_cpp("requantize")
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.path) + ".lock"):
            cached = self._cached_sha256()  # another process may have derived it meanwhile
            if cached:
                return cached
            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype = getattr(llama_cpp, QUANT_TYPES[self.quant_type])
            params.allow_requantize = True
            params.nthread = max(1, len(os.sched_getaffinity(0)))
            partial = self.path.with_name(self.path.name + f".{os.getpid()}.partial")
            quiet = logging.getLogger("llama-cpp-python")  # llama.cpp logs a line per tensor otherwise
            level = quiet.level
            quiet.setLevel(logging.ERROR)
            try:
                status = llama_cpp.llama_model_quantize(
                    str(self.source).encode(), str(partial).encode(), ctypes.byref(params)
                )
                if status != 0 or not partial.is_file():
                    raise RuntimeError(
                        f"llama.cpp could not quantise {self.source} to {self.quant_type} (status {status})"
                    )
                digest = file_digest(partial)
                os.replace(partial, self.path)
            finally:
                quiet.setLevel(level)
                partial.unlink(missing_ok=True)
            record = {**self._expected(), "sha256": digest}
            self._sidecar.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
            return digest
