"""The project's own scorers beyond the built-in grid: one function each, registered by name.

A scorer here is a function ``(record, predictions, lowercase) -> (p_sum, r_sum, n_pred,
n_gold)`` decorated with :func:`src.scoring.scorer_registry.register_scorer`; naming it
in ``scoring.variants`` logs its precision, recall and F1 beside the primary metric and
adds its column to the report. ``src.scoring.variants`` imports this module, so whatever
scores outputs knows these scorers. Example::

    @register_scorer("exact_string", "exact string", "a span counts when its string equals one of the other side")
    def exact_string(record, predictions, lowercase):
        gold = [span.text for span in record.spans]
        predicted = [prediction.text for prediction in predictions]
        p_sum = sum(text in gold for text in predicted)
        r_sum = sum(text in predicted for text in gold)
        return p_sum, r_sum, len(predicted), len(gold)

None is registered yet: the study's scorers are the grid of ``scorer_registry``.
"""
