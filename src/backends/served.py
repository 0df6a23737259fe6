"""What a provider says it served, and whether that is the model that was asked for.

A routing provider (OpenRouter) may answer from a fallback model; a reply's ``model``,
``system_fingerprint``, OpenRouter's ``provider`` and, where a provider names it, the weight
format (``quantization``) say who really answered. They are kept
with every answer (cache entry, predictions) so that a run can count and report mismatches.

Matching rule (:func:`same_model`): two names are the same model when they are equal after
normalising the ways providers spell one model:

1. case is ignored, and so is surrounding whitespace;
2. an organisation prefix is dropped (``openai/gpt-4o`` = ``gpt-4o``): only the part after
   the last ``/`` is compared;
3. a routing tag after ``:`` is dropped (``llama-3-8b:free``, ``:nitro``, ``:floor``, ``:beta``);
4. a release-date suffix (``-2024-08-06`` or ``-20240806``) present on only one side is dropped
   (``gpt-4o`` = ``gpt-4o-2024-08-06``); when both sides carry a date, the dates must agree
   (two snapshots are two models).

Anything else is a mismatch, including version suffixes that are not dates (``-2507``). A reply
that names no model is not a mismatch (there is nothing to compare), except on a pinned run
(:func:`off_pin_reason`): there it is named and treated as off the pin.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from src.backends.routing import off_pin

ON_MISMATCH = ("warn", "fail")
SERVED_FIELDS = ("model", "system_fingerprint", "provider", "quantization")
#: The ``served`` key naming why an answer is off its pin (another model, provider or quantization):
#: such an answer is kept and counted under ``on_model_mismatch: warn``, never cached.
OFF_PIN = "off_pin"
_DATE_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8})$")


def served_info(payload: dict) -> dict[str, str]:
    """The provider's own account of who answered: the string fields of ``SERVED_FIELDS``."""
    return {name: payload[name] for name in SERVED_FIELDS if isinstance(payload.get(name), str) and payload[name]}


def _base_and_date(name: str) -> tuple[str, str | None]:
    name = name.strip().lower().rpartition("/")[2].partition(":")[0]
    match = _DATE_SUFFIX.search(name)
    if match is None:
        return name, None
    return name[: match.start()], match.group(1).replace("-", "")


def same_model(requested: str, served: str | None) -> bool:
    """True when ``served`` names the ``requested`` model under the module's matching rule."""
    if not served:
        return True
    (requested_base, requested_date), (served_base, served_date) = _base_and_date(requested), _base_and_date(served)
    if requested_base != served_base:
        return False
    return requested_date is None or served_date is None or requested_date == served_date


def is_mismatch(requested: str, served: dict | None) -> bool:
    """True when the served record names a model other than ``requested``."""
    return not same_model(requested, (served or {}).get("model"))


def off_pin_reason(requested: str, routing: dict | None, served: dict | None) -> str | None:
    """Why ``served`` is not the pinned model, provider or quantization; None when it is (or says nothing)."""
    if is_mismatch(requested, served):
        return f"served model {(served or {})['model']!r} is not {requested!r}"
    where = off_pin(routing, served)
    if where is not None:
        return f"served off the pinned routing: {where}"
    if routing and not (served or {}).get("model"):  # a pinned run checks who served: silence is not a pass
        return f"the reply names no model (a pinned run of {requested!r} checks who served it)"
    return None


def mismatch_counts(requested: str, served_records: Iterable[dict | None]) -> Counter[str]:
    """How many answers each other model served (empty when every answer matched)."""
    return Counter(record["model"] for record in served_records if record and is_mismatch(requested, record))
