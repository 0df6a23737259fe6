"""User-info is removed from every URI before it is written anywhere."""

from __future__ import annotations

import pytest

from src.redact import redact_uris, without_userinfo


@pytest.mark.parametrize(
    "uri, clean",
    [
        ("http://alice:TOKEN@host", "http://host"),
        ("http://alice:TOKEN@mlflow.example.org:5000/api?x=1#f", "http://mlflow.example.org:5000/api?x=1#f"),
        ("https://TOKEN@host/v1", "https://host/v1"),
        ("s3://KEYID:SECRET@bucket/path", "s3://bucket/path"),
        ("postgresql://u:p%40ss@db:5432/mlflow", "postgresql://db:5432/mlflow"),
        ("http://[::1]:8000/v1", "http://[::1]:8000/v1"),
        ("https://openrouter.ai/api/v1", "https://openrouter.ai/api/v1"),
        ("sqlite:///mlruns.db", "sqlite:///mlruns.db"),
        ("file:///tmp/a@b/mlruns", "file:///tmp/a@b/mlruns"),  # an "@" in a path is no credential
        ("not-a-url", "not-a-url"),
        ("", ""),
    ],
)
def test_without_userinfo(uri, clean):
    assert without_userinfo(uri) == clean


def test_redact_uris_in_free_text():
    text = "tracking at http://alice:TOKEN@host:5000 and remote s3://K:S@bucket, mail a@b.org"
    assert redact_uris(text) == "tracking at http://host:5000 and remote s3://bucket, mail a@b.org"
    assert "TOKEN" not in redact_uris("see https://user:TOKEN@h/x?q=a@b")
