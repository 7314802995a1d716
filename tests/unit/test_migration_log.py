"""``ctx.log``: what reaches an event and a log line, whatever the author passes."""

from __future__ import annotations

import logging

import pytest

from mongoshift.project.events import Event, Events
from mongoshift.project.migration_log import MigrationLog, correlated


def _log(seen: list[Event]) -> MigrationLog:
    return MigrationLog(Events([seen.append]), correlated(logging.getLogger("mongoshift.test"), "r1", "0001_a.py", "up", 1), "0001_a.py", "up", 1)


def test_texts_in_the_data_are_redacted_like_the_message(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[Event] = []
    with caplog.at_level(logging.INFO, logger="mongoshift.test"):
        _log(seen).info("connecting to mongodb://app:hunter2@db1", uri="mongodb://app:hunter2@db1/x", hosts=[{"uri": "mongodb://u:pw2@h"}], count=3)
    (event,) = seen
    assert "hunter2" not in str(event.data) and "pw2" not in str(event.data)
    assert event.data["data"]["count"] == 3 and event.data["data"]["uri"].startswith("mongodb://")
    assert "hunter2" not in caplog.text and "pw2" not in caplog.text


def test_a_value_under_a_secrets_name_is_masked(caplog: pytest.LogCaptureFixture) -> None:
    """``ctx.log.info("connecting", password="hunter2")`` printed ``password=hunter2`` on the line and in ``--json``'s
    logs, where a ``password=...`` pair in any text is masked (stop 56, h5)."""
    seen: list[Event] = []
    with caplog.at_level(logging.INFO, logger="mongoshift.test"):
        _log(seen).info("connecting", password="hunter2", options={"clientSecret": "s3cr3t", "api_token": 42}, user="app", count=3)
    (event,) = seen
    data = event.data["data"]
    assert data == {"password": "***", "options": {"clientSecret": "***", "api_token": "***"}, "user": "app", "count": 3}
    assert "hunter2" not in caplog.text and "s3cr3t" not in caplog.text and "password=***" in caplog.text


def test_a_value_that_cannot_be_shown_drops_the_line_and_never_raises() -> None:
    class Hostile:
        def __str__(self) -> str:
            raise RuntimeError("no")

    seen: list[Event] = []
    log = _log(seen)
    log.info("x", value=Hostile())
    log.warning(Hostile())  # type: ignore[arg-type]
    log.info("after")
    assert [event.data["message"] for event in seen] == ["after"]
