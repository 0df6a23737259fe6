"""tempgen: a reproducible harness for the generalization of temporal extraction."""
