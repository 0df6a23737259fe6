"""Credentials out of URIs before they are written anywhere.

A tracking server, a model endpoint or a DVC remote may be configured with its credential in
the URI (``http://alice:TOKEN@host:5000``). Whatever is logged, printed or written to an
artifact goes through :func:`without_userinfo` (one URI) or :func:`redact_uris` (free text),
which drop the user-info part and keep everything a reader needs (scheme, host, port, path).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

# scheme://user-info@  ...  the user-info is everything up to the last "@" before the host part
_URI_WITH_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/?#\s@]*@)")


def without_userinfo(uri: str) -> str:
    """``uri`` with any ``user:password@`` removed (``http://alice:T@h:1/x`` -> ``http://h:1/x``).

    A value that is not a URI with an authority (a path, ``file:///...``, empty) is returned
    unchanged; so is a URI that carries no user-info.
    """
    if not isinstance(uri, str) or "@" not in uri or "://" not in uri:
        return uri
    try:
        parts = urlsplit(uri)
    except ValueError:
        return redact_uris(uri)
    if "@" not in parts.netloc:
        return redact_uris(uri)  # an "@" in a path or query is no credential, but a malformed URI may hide one
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def redact_uris(text: str) -> str:
    """``text`` with the user-info of every ``scheme://user-info@host`` in it removed."""
    if not isinstance(text, str) or "@" not in text:
        return text
    return _URI_WITH_USERINFO.sub(lambda match: match.group("scheme"), text)
