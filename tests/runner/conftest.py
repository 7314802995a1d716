"""Fixtures of the runner tests."""

from __future__ import annotations

import logging
import sys
import threading
import types
from collections.abc import Iterator

import pytest

#: A migration body that clears the run's lock and then outlives the heartbeat without looking at ctx.cancelled:
#: it returns once the run has found its lock gone (the ``lock_lost_seen`` fixture), not after a fixed sleep that
#: a loaded machine's heartbeat may not have renewed within. The bound only ends a hang.
LOSES_LOCK = """
import sys

def up(ctx):
    ctx.db["_mongoshift_locks"].delete_many({})
    assert sys.modules["mongoshift_test_lock"].lost.wait(60), "the run never noticed that its lock was cleared"
"""


@pytest.fixture
def lock_lost_seen(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Set when this process declares a migration lock lost (its log record), readable by a migration
    body as ``sys.modules["mongoshift_test_lock"].lost``."""
    seen = threading.Event()

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("migration lock lost"):
                seen.set()

    handler = Seen(logging.ERROR)
    logger = logging.getLogger("mongoshift.lock")
    logger.addHandler(handler)
    monkeypatch.setitem(sys.modules, "mongoshift_test_lock", types.SimpleNamespace(lost=seen))
    try:
        yield seen
    finally:
        logger.removeHandler(handler)
