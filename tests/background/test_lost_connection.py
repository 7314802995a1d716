"""A runner rides out a lost connection (issue 24, item 5): it retries with backoff, for a bounded time.

The server stops answering some of the runner's requests past its socket timeout (the
``failCommand`` fail point's ``blockConnection``, twice: the request and the driver's own retry),
as a slow or failing-over server would: the driver raises ``NetworkTimeout``, a connection error
like ``_OperationCancelled`` and ``ServerSelectionTimeoutError``. The run still completes, the
dropped slice is not counted against its partition, and only an outage longer than
``background_reconnect_seconds`` stops it.
"""

from __future__ import annotations

import pytest
from pymongo.errors import AutoReconnect

from mongoshift.api import background as bg, migrations as command
from mongoshift.background.lanes.outage import FIRST_RETRY_MS, RETRY_CAP_MS, Outage
from mongoshift.background.state.events import Event
from mongoshift.project.connection import MIN_CONNECT_TIMEOUT_MS, client_options

from ..conftest import fail_command
from .conftest import background_file, seed

NAME = "0001_names.py"

#: The runner's socket timeout, and how long the fail point holds a request: well past it.
SOCKET_TIMEOUT_MS = 2500
BLOCK_MS = 5000


def slow_server_project(project, db_name: str):  # type: ignore[no-untyped-def]
    """The project's runner gives up on a request after SOCKET_TIMEOUT_MS."""
    separator = "&" if "?" in project.uri else "?"
    project.uri = f"{project.uri}{separator}socketTimeoutMS={SOCKET_TIMEOUT_MS}"
    project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.2)
    return project


def blocked(client, commands: list[str], namespace: str):  # type: ignore[no-untyped-def]
    """The next two of these commands on ``namespace`` (a request and the driver's retry of it) time out."""
    return fail_command(client, {"times": 2}, failCommands=commands, blockConnection=True, blockTimeMS=BLOCK_MS, namespace=namespace)


async def test_a_slice_that_loses_its_connection_is_retried_and_not_counted_as_a_failure(fast_project, db, client) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 120)
    fast_project = slow_server_project(fast_project, db.name)
    fast_project.add(NAME, background_file(batch_size=40, extra="max_slice_failures=1,"))
    s = fast_project.settings()
    await command.up(s)
    events: list[Event] = []
    async with blocked(client, ["update"], f"{db.name}.people"):
        (report,) = await bg.run(s, [NAME], observers=[events.append])
    assert report.status == "completed", report
    assert await db.people.count_documents({"__v": 2}) == 120
    ends = [e.data["outcome"] for e in events if e.kind == "slice_end"]
    assert "disconnected" in ends and "error" not in ends
    assert await db["_mongoshift_background_partitions"].count_documents({"failures": {"$gt": 0}}) == 0


async def test_a_claim_that_loses_its_connection_is_tried_again(fast_project, db, client) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 60)
    fast_project = slow_server_project(fast_project, db.name)
    fast_project.add(NAME, background_file(batch_size=40))
    s = fast_project.settings()
    await command.up(s)
    async with blocked(client, ["findAndModify"], f"{db.name}._mongoshift_background_partitions"):
        (report,) = await bg.run(s, [NAME])
    assert report.status == "completed", report
    assert await db.people.count_documents({"__v": 2}) == 60


async def test_a_coordinator_step_that_loses_its_connection_is_tried_again(fast_project, db, client) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 60)
    fast_project = slow_server_project(fast_project, db.name)
    fast_project.add(NAME, background_file(batch_size=40))
    s = fast_project.settings()
    await command.up(s)
    # The first count of the partitions after the start is the coordinator's (lanes start after its step).
    async with blocked(client, ["aggregate"], f"{db.name}._mongoshift_background_partitions"):
        (report,) = await bg.run(s, [NAME])
    assert report.status == "completed", report


def test_an_outage_backs_off_and_gives_up_past_its_bound() -> None:
    clock = [100.0]
    outage = Outage(60, lambda: clock[0])
    lost = AutoReconnect("h:1: [Errno 111] Connection refused")
    waits = []
    for _ in range(8):
        waits.append(outage.failed(lost))
        clock[0] += 5
    assert waits[0] == FIRST_RETRY_MS and waits[1] == 2 * FIRST_RETRY_MS and max(waits) == RETRY_CAP_MS
    outage.ok()  # a request got through: the next outage has its whole bound again
    clock[0] += 1000
    assert outage.failed(lost) == FIRST_RETRY_MS
    clock[0] += 60
    with pytest.raises(AutoReconnect):
        outage.failed(lost)


def test_a_bound_of_zero_gives_up_at_the_first_lost_connection() -> None:
    with pytest.raises(AutoReconnect):
        Outage(0, lambda: 0.0).failed(AutoReconnect("connection closed"))


def test_a_busy_servers_late_heartbeat_is_not_taken_for_a_lost_server(fast_project) -> None:  # type: ignore[no-untyped-def]
    options = client_options(fast_project.settings(connect_timeout_seconds=2))
    assert options["serverSelectionTimeoutMS"] == 2000  # an unreachable server still fails after the setting
    assert options["connectTimeoutMS"] == MIN_CONNECT_TIMEOUT_MS >= 60_000
