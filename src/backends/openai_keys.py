"""Which API key an OpenAI-compatible endpoint may receive, and keeping it out of every message.

A provider's own variable (``OPENROUTER_API_KEY`` -> openrouter.ai, ``OPENAI_API_KEY`` ->
api.openai.com, see :data:`PROVIDER_KEY_HOSTS`) is only ever sent to that host or its
subdomains. Overriding ``base_url`` of such a model sends a loopback server the placeholder key
instead, and any other host is refused (:class:`KeyHostMismatchError`) until ``api_key_env``
names a variable of its own (or is null). A variable that is not a provider's
(``VLLM_API_KEY``, a test's) is the explicit choice of whoever wrote the config and goes to
whatever ``base_url`` says.
"""

from __future__ import annotations

import ipaddress
import os

from src.redact import redact_uris

PROVIDER_KEY_HOSTS = {"OPENROUTER_API_KEY": "openrouter.ai", "OPENAI_API_KEY": "api.openai.com"}
PLACEHOLDER_KEY = "EMPTY"  # what local servers (vLLM, llama.cpp) accept when they check no key
MIN_SECRET_PIECE = 4  # shortest prefix/suffix of the key scrubbed from messages


class MissingAPIKeyError(RuntimeError):
    """The environment variable that should hold the API key is unset or empty."""


class KeyHostMismatchError(ValueError):
    """A provider's key variable was pointed at another host."""


def is_loopback(host: str) -> bool:
    """True for localhost names and every loopback or unspecified address (127.0.0.0/8, ::1)."""
    host = host.lower().rstrip(".").strip("[]")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


def host_within(host: str, domain: str) -> bool:
    """``host`` is ``domain`` or one of its subdomains (not merely a name ending in it)."""
    return host == domain or host.endswith("." + domain)


def key_for(api_key_env: str | None, base_url: str, host: str, require_api_key: bool | None) -> str:
    """The key ``host`` may receive (the module docstring's rule); the placeholder where none is needed."""
    provider_host = PROVIDER_KEY_HOSTS.get(api_key_env or "")
    if provider_host and not host_within(host, provider_host):
        if is_loopback(host) and not require_api_key:
            return PLACEHOLDER_KEY
        raise KeyHostMismatchError(
            f"openai backend: refusing to send {api_key_env} to {host or base_url}: that "
            f"key belongs to {provider_host}; set api_key_env to the variable holding this "
            f"server's own key (or null for a server that needs none)"
        )
    needs_key = not is_loopback(host) if require_api_key is None else require_api_key
    key = os.environ.get(api_key_env, "").strip() if api_key_env else ""
    if key:
        return key
    if needs_key:
        raise MissingAPIKeyError(
            f"openai backend: no API key for {redact_uris(base_url)}: set the environment variable "
            f"{api_key_env or '(api_key_env is empty)'} (or point base_url at a local "
            f"server such as vLLM on localhost, which needs no key)"
        )
    return PLACEHOLDER_KEY


def scrubbed(text: str, key: str) -> str:
    """``text`` without URL credentials, the key, or any prefix/suffix of it of MIN_SECRET_PIECE+
    characters (servers like to echo a key's last characters)."""
    text = redact_uris(text)
    if not key or key == PLACEHOLDER_KEY:
        return text
    for length in range(len(key), MIN_SECRET_PIECE - 1, -1):
        text = text.replace(key[:length], "***").replace(key[-length:], "***")
    return text
