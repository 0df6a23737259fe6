"""The study's analysis and report: MLflow runs -> RQ1-RQ3 tables, figures and a written report.

``loading`` turns an experiment's runs into tidy tables and stacked per-instance
statistics; ``rq`` holds the research-question computations as pure functions;
``figures`` draws them; ``writer`` writes the markdown/HTML report. ``python -m
src.analyze`` runs the whole chain.
"""
