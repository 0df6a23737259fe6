"""Credentials out of URIs before they are written anywhere: one function, and a logging filter.

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
