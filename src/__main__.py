"""``python -m src STAGE [ARGS]``: the one launcher (:mod:`src.launch`): pins, then runs the stage."""

import sys

from src.launch import dispatch

sys.exit(dispatch(sys.argv[1:]))
