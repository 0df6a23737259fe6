"""The leaf every other package may import: the errors entry points turn into one line and exit
code 2, the value checks settings share, where the checkout's files are and ``params.yaml`` read
once. It imports nothing of ``src`` but :mod:`src.study` and :mod:`src.redact` (enforced by the
import-linter contracts in ``pyproject.toml``)."""
