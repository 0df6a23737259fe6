"""Children that a test stops with Ctrl-C (SIGINT).

A shell's background job (``pytest ... &``, ``nohup ... &``) ignores SIGINT and its children
inherit that, so a child would sleep through the test's Ctrl-C. Passed as ``preexec_fn``,
:func:`ctrl_c_as_in_a_terminal` starts the child as a foreground command is started.
"""

from __future__ import annotations

import signal


def ctrl_c_as_in_a_terminal() -> None:
    """Give SIGINT its default meaning in the child (Python then raises KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
