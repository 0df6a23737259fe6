"""Prompt tests."""
