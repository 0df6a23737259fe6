"""Credentials out of everything written: one scrubber for config trees, URIs and log lines.

:func:`scrub` is the one scrubber of whatever is written as a file or an artifact (the resolved
configuration, Hydra's copies, predictions, usage): it replaces the values of secret-looking
keys (``api_key``, ``token``, ``password``, ...) and every known secret value (an
``extra_headers`` value, the API keys in the environment) by ``***REDACTED***``, and drops the
user-info of every URI in any string (``model.options.base_url=https://alice:s3cret@proxy/v1``).

A tracking server, a database store, a model endpoint or a DVC remote may carry its credential
in the URI (``postgresql://alice:p@ss@db:5432/mlflow``). Whatever is printed, logged or written
to a file or an artifact goes through :func:`redact_uris`, which drops the user-info, everything
up to the *last* ``@`` of the authority (a password may hold ``@`` itself), and keeps what a
reader needs (scheme, host, port, path). Entry points also install :class:`RedactingFilter` on
the log handlers (:func:`install_log_redaction`), so no log line written by this project or a
library carries one either.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

SECRET_KEY_PATTERN = re.compile(
    r"^(.*[_-])?(api[_-]?key|token|access[_-]token|secret|password|authorization)$", re.IGNORECASE
)
REDACTED = "***REDACTED***"

# scheme://user-info@host...: the authority ends at the first "/", "?", "#" or space, and the
# user-info is everything in it up to its last "@" (greedy, so a password's own "@" stays inside)
_URI_WITH_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/?#\s]*@)")


def redact_uris(text: str) -> str:
    """``text`` (a URI or free text) with the user-info of every ``scheme://user-info@host`` removed.

    ``http://alice:T@h:1/x`` -> ``http://h:1/x``; a value without such a URI (a path,
    ``file:///a@b``, ``a@b.org``) is returned unchanged, and so is anything that is not a string.
    """
    if not isinstance(text, str) or "@" not in text:
        return text
    return _URI_WITH_USERINFO.sub(lambda match: match.group("scheme"), text)


def scrub(value: Any, secrets: tuple[str, ...] = ()) -> Any:
    """A copy of ``value`` (a config tree, a row, a string) with secret-looking keys' values and every
    known ``secrets`` value replaced by ``REDACTED`` and URI user-info dropped from every string.
    Keys that *name* a variable (``api_key_env``) do not match; keys that hold one do."""
    if isinstance(value, Mapping):
        return {
            key: REDACTED if SECRET_KEY_PATTERN.match(str(key)) and item is not None else scrub(item, secrets)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [scrub(item, secrets) for item in value]
    if isinstance(value, str):
        for secret in secrets:
            if secret:
                value = value.replace(secret, REDACTED)
        return redact_uris(value)
    return value


class RedactingFilter(logging.Filter):
    """Rewrites each log record's message without URI credentials (its arguments merged in first)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact_uris(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def install_log_redaction(logger: logging.Logger | None = None) -> None:
    """Add the filter to every handler of ``logger`` (the root logger): records from any logger pass
    through a handler, not through the root logger's own filters."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
