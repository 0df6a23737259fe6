"""Fine-tuned token classifiers (word-level BIO tagging) as study configurations.

Modules: :mod:`bio` (spans <-> tags), :mod:`align` (tags -> subword labels),
:mod:`models` (model choices), :mod:`train` (Trainer fine-tuning), :mod:`predict`
(:class:`~src.finetune.predict.TokenClassifier` and the prediction command) and
:mod:`windows` (long documents). Heavy libraries are imported inside the functions
that need them, so importing this package stays cheap.
"""
