"""User-info is removed from every URI before it is written anywhere."""

from __future__ import annotations

import pytest

from src.redact import redact_uris


@pytest.mark.parametrize(
    "uri, clean",
    [
        ("http://alice:TOKEN@host", "http://host"),
        ("http://alice:TOKEN@mlflow.example.org:5000/api?x=1#f", "http://mlflow.example.org:5000/api?x=1#f"),
        ("https://TOKEN@host/v1", "https://host/v1"),
        ("s3://KEYID:SECRET@bucket/path", "s3://bucket/path"),
        ("postgresql://u:p%40ss@db:5432/mlflow", "postgresql://db:5432/mlflow"),
        # a password holding "@" itself: the user-info runs to the authority's last "@"
        ("https://alice:p@ss@host/v1", "https://host/v1"),
        ("postgresql://mlflow:s3cr@t@@db.example.org:5432/mlflow", "postgresql://db.example.org:5432/mlflow"),
        (
            "mysql+pymysql://root:a@b@c@127.0.0.1:3306/mlflow?charset=utf8",
            "mysql+pymysql://127.0.0.1:3306/mlflow?charset=utf8",
        ),
        ("http://[::1]:8000/v1", "http://[::1]:8000/v1"),
        ("https://openrouter.ai/api/v1", "https://openrouter.ai/api/v1"),
        ("sqlite:///mlruns.db", "sqlite:///mlruns.db"),
        ("file:///tmp/a@b/mlruns", "file:///tmp/a@b/mlruns"),  # an "@" in a path is no credential
        ("not-a-url", "not-a-url"),
        ("", ""),
    ],
)
def test_redact_uris(uri, clean):
    assert redact_uris(uri) == clean


def test_redact_uris_in_free_text():
    text = "tracking at http://alice:TOKEN@host:5000 and remote s3://K:S@bucket, mail a@b.org"
    assert redact_uris(text) == "tracking at http://host:5000 and remote s3://bucket, mail a@b.org"
    assert "TOKEN" not in redact_uris("see https://user:TOKEN@h/x?q=a@b")


def test_free_text_with_at_signs_in_passwords_loses_all_of_them():
    text = "store postgresql://u:p@ss@db:5432/m failed; endpoint https://k:x@y@z@api.example.org/v1 down"
    assert redact_uris(text) == "store postgresql://db:5432/m failed; endpoint https://api.example.org/v1 down"


def test_the_log_filter_redacts_every_record_whatever_logger_wrote_it(caplog):
    import logging

    from src.redact import install_log_redaction

    caplog.handler.filters.clear()
    root = logging.getLogger()
    root.addHandler(caplog.handler)
    try:
        install_log_redaction()
        logging.getLogger("some.library").warning("store %s unusable", "postgresql://u:p@ss@db:5432/m")
    finally:
        root.removeHandler(caplog.handler)
    assert caplog.records[-1].getMessage() == "store postgresql://db:5432/m unusable"
    assert "p@ss" not in caplog.text
