"""The study's analysis and report: the pipeline's runs -> RQ1-RQ3 tables, figures and a written report.

``provenance`` finds exactly the runs the pipeline's summary files name and checks them;
``loading`` turns those runs into tidy tables and per-configuration instance statistics;
``rq`` holds the research-question computations as pure functions (each pair tested on
the instances both configurations share, resampling whole documents, with four verdicts:
``comparisons``); ``uncertainty`` (interval widths, minimum detectable differences) and
``robustness`` (flip rate, drop rate, worst case per instance) add to them; ``analysis``
assembles them into one :class:`~src.report.analysis.Analysis`, ``summary`` its JSON; ``figures`` draws it; ``writer`` writes the
markdown/HTML report and the tables. ``python -m src.analyze`` runs the whole chain.
"""
