"""Fixtures of the crash tests."""

from __future__ import annotations

import pytest

from tests.support.stores import backend_params


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every crash test runs on SQLite and on PostgreSQL."""
    backend_params(metafunc)
