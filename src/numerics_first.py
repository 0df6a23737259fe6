"""Imported first by every stage's entry module: when a ``src`` module runs as the program
(``python -m src.run``, ``python -m src.derive.adv``, ...), its process is pinned
(:func:`src.numerics.pin`) before any library loads, so the restart that sets the environment
costs an interpreter start, not a second import of torch and TextAttack. Imported by anything
else (a test importing ``src.run``), it does nothing.
"""

from __future__ import annotations

from src.numerics import pin, running_a_stage

if running_a_stage():
    pin()
