"""Round trips of the migration line: a trivial migration costs its record and the lock check, no more.

Counted with pymongo's command monitoring on the clients the run opens, so a
per-migration re-read of the changelog, of the batch number or of the files
shows up here as soon as it is written (issue 11: at most 3 per migration).
"""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import monitoring

from mongoshift.api import migrations as command
from mongoshift.project import connection

#: What ``up`` may spend per migration, and once per run (connect, checks, indexes, lock, reads).
PER_MIGRATION = 3
PER_RUN = 12

TRIVIAL = "def up(ctx):\n    pass\n"
TRIVIAL_ASYNC = "async def up(ctx):\n    pass\n"


class Commands(monitoring.CommandListener):
    def __init__(self) -> None:
        self.names: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture
def commands(monkeypatch: pytest.MonkeyPatch) -> Commands:
    """Every command sent by the clients a run opens (async, and sync for plain ``def`` bodies)."""
    listener = Commands()
    options = connection.client_options

    def watched(settings: Any) -> dict[str, Any]:
        return {**options(settings), "event_listeners": [listener]}

    monkeypatch.setattr(connection, "client_options", watched)
    return listener


async def _up(project, commands: Commands, count: int, source: str) -> list[str]:  # type: ignore[no-untyped-def]
    start = len(list(project.migrations.glob("*.py")))
    for i in range(start + 1, start + count + 1):
        project.add(f"{i:04d}_m.py", source)
    commands.names.clear()
    report = await command.up(project.settings())
    assert [r.status for r in report.results] == ["applied"] * count
    return list(commands.names)


@pytest.mark.parametrize("source", [TRIVIAL, TRIVIAL_ASYNC], ids=["sync", "async"])
async def test_up_costs_at_most_three_round_trips_per_migration(project, commands, source) -> None:  # type: ignore[no-untyped-def]
    one = await _up(project, commands, 1, source)
    many = await _up(project, commands, 20, source)
    assert len(one) <= PER_MIGRATION + PER_RUN, one
    # the same run shape, 19 more migrations: the difference is what each one costs
    per_migration = (len(many) - len(one)) / 19
    assert per_migration <= PER_MIGRATION, sorted(many)
    assert len(many) <= PER_MIGRATION * 20 + PER_RUN, sorted(many)


async def test_status_round_trips_do_not_grow_with_the_files(project, commands) -> None:  # type: ignore[no-untyped-def]
    await _up(project, commands, 30, TRIVIAL)
    commands.names.clear()
    rows = await command.status(project.settings())
    assert len(rows) == 30 and all(r.state == "applied" for r in rows)
    assert len(commands.names) <= 6, commands.names
