"""MLflow and the files that stand for its runs: the store's conventions (:mod:`~src.tracking.store`),
its health (:mod:`~src.tracking.health`), the profile's run tree (:mod:`~src.tracking.run_tree`), the
one evaluation run every system is scored in (:mod:`~src.tracking.evaluation`) and the evidence
folders that carry runs through DVC (:mod:`~src.tracking.evidence`)."""
