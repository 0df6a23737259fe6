"""A prompted run: its configuration checked and built (:mod:`~src.runs.configure`), the model
under a strategy as a scored system (:mod:`~src.runs.prompted`) and the run's life from plan to
verdict (:mod:`~src.runs.lifecycle`); ``python -m src.run`` is the entry point."""
