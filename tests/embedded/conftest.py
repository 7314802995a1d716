"""The in-process embedded server the patch tests drive: one per test module (each module seeds its own data)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .in_process import InProcessServer, in_process_server


@pytest.fixture(scope="module")
def server() -> Iterator[InProcessServer]:
    with in_process_server() as started:
        yield started
