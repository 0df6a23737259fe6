"""The one launcher: every stage runs as ``python -m src STAGE [ARGS]``, pinned before it loads.

:func:`dispatch` pins the process first (:func:`src.numerics.pin`: the thread counts, kernels
and hash seed of ``params.yaml``, restarting the interpreter once when they were not set), then
imports the stage's module and calls its ``main``: no library is imported before the numerics are
fixed, and none twice. A stage module run directly (``python -m src.run ...``, as the README's
hand runs do) calls :func:`launch` from its ``__main__`` block, which pins the same way; nothing
pins on import, so a test importing a module computes as the test's process does.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

from src.core.errors import ConfigError
from src.numerics import pin

#: Stage name (``python -m src NAME``) -> the module whose ``main()`` runs it (reading ``sys.argv``).
STAGES = {
    "prepare": "src.data.prepare",
    "train": "src.finetune.train",
    "evaluate": "src.finetune.evaluate",
    "voc": "src.derive.voc",
    "adv": "src.derive.adv",
    "adv_p": "src.derive.adv_p",
    "run": "src.run",
    "analyze": "src.analyze",
}


def _run(main: Callable[[], Any]) -> int:
    """``main``'s exit code; a settings file it cannot use (:class:`~src.core.errors.ConfigError`
    from :mod:`src.core.settings`, wherever the stage reads it) is one ``error:`` line and 2."""
    try:
        return main() or 0
    except ConfigError as error:
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2


def _pinned(main: Callable[[], Any]) -> Callable[[], Any]:
    def pinned_main() -> Any:
        pin()  # may restart the process; a setting it cannot use is a ConfigError like the stage's
        return main()

    return pinned_main


def launch(main: Callable[[], Any]) -> None:
    """Pin, then run ``main`` and exit with what it returns (a stage module's ``__main__`` block)."""
    sys.exit(_run(_pinned(main)))


def dispatch(arguments: Sequence[str]) -> int:
    """``python -m src STAGE ARGS``: pin, then run the stage's ``main`` with ``ARGS`` as its argv."""
    if not arguments or arguments[0] not in STAGES:
        named = arguments[0] if arguments else "nothing"
        print(
            f"error: python -m src STAGE [ARGS]: {named} is no stage (the stages: {', '.join(STAGES)})", file=sys.stderr
        )
        return 2
    stage, rest = arguments[0], list(arguments[1:])

    def stage_main() -> Any:
        module = importlib.import_module(STAGES[stage])  # after pinning: its libraries load pinned
        sys.argv = [f"python -m src {stage}", *rest]
        return module.main()

    return _run(_pinned(stage_main))
