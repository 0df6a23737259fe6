"""Helpers shared by the test modules: paths, record builders, stores, requests.

Not tests: nothing here is collected. Test modules import from here, never from each other.
"""
