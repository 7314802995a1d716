"""A runner rides out a lost connection (issue 24, item 5): it retries with backoff, for a bounded time.

The server stops answering some of the runner's requests past its socket timeout (the
``failCommand`` fail point's ``blockConnection``, twice: the request and the driver's own retry),
as a slow or failing-over server would: the driver raises ``NetworkTimeout``, a connection error
like ``_OperationCancelled`` and ``ServerSelectionTimeoutError``. The run still completes, the
dropped slice is not counted against its partition, and only an outage longer than
``background_reconnect_seconds`` stops it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
import threading
import types
from urllib.parse import urlsplit

import pytest
from pymongo.errors import AutoReconnect, ServerSelectionTimeoutError

from mongoshift.api import background as bg, migrations as command
from mongoshift.background.lanes.lane import RELEASE_AFTER_LOSS_S
from mongoshift.background.lanes.outage import FIRST_RETRY_MS, PROBE_FLOOR_S, RETRY_CAP_MS, Outage
from mongoshift.background.state.events import Event
from mongoshift.errors import MongoshiftError
from mongoshift.project.connection import MIN_CONNECT_TIMEOUT_MS, client_options
from mongoshift.project.session import CLOSE_WAIT_S

from ..conftest import fail_command, until
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


def test_giving_up_is_said_once_for_all_the_lanes(caplog) -> None:  # type: ignore[no-untyped-def]
    """Found in a user trial: each lane and the coordinator logged "giving up" for the same outage."""
    clock = [0.0]
    outage = Outage(3, lambda: clock[0])
    lost = AutoReconnect("connection closed")
    outage.failed(lost)
    clock[0] += 5
    for _ in range(3):
        with pytest.raises(AutoReconnect):
            outage.failed(lost)
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == ["no request to MongoDB succeeded for 5s: giving up"]


def test_a_bound_of_zero_gives_up_at_the_first_lost_connection() -> None:
    with pytest.raises(AutoReconnect):
        Outage(0, lambda: 0.0).failed(AutoReconnect("connection closed"))


def test_a_busy_servers_late_heartbeat_is_not_taken_for_a_lost_server(fast_project) -> None:  # type: ignore[no-untyped-def]
    options = client_options(fast_project.settings(connect_timeout_seconds=2))
    assert options["serverSelectionTimeoutMS"] == 2000  # an unreachable server still fails after the setting
    assert options["connectTimeoutMS"] == MIN_CONNECT_TIMEOUT_MS >= 60_000


#: The driver's own words for how long a server selection waited (``..., Timeout: 0.5s, Topology Description: ...``).
_SELECTION_WAITED = re.compile(r"Timeout: ([0-9.]+)s")
#: The driver's log of a server selection that waits: how long it may (``"remainingTimeMS": 1998``).
_GIVEN = re.compile(r'"remainingTimeMS": (\d+)')
_OPERATION_ID = re.compile(r'"operationId": (-?\d+)')
_OPERATION = re.compile(r'"operation": "(\w+)"')

#: The second batch's first document waits in the worker thread until the test has taken the server away.
HELD_AT_SECOND_BATCH = background_file(batch_size=40).replace(
    "def migrate(doc, ctx):\n",
    "def migrate(doc, ctx):\n    import sys\n    side = sys.modules['mongoshift_test_gone']\n"
    "    if doc['_id'] == 40:\n        side.waiting.set()\n        assert side.go.wait(60)\n",
)


class Proxy:
    """A TCP proxy in front of one server, which the test takes away mid-run: its connections are cut and its
    port refuses new ones, as when the server's process is killed."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self.writers += [writer, up_writer]

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                sink.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def gone(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.transport.abort()
        await self.server.wait_closed()


async def test_a_runner_gives_up_within_its_bound_not_a_server_selection_later(standalone_project, standalone_db, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    """Found in a user trial: with ``background_reconnect_seconds = 3`` a runner whose server went away exited after
    about 40 s. Each request tried again during the outage waited the driver's whole server selection
    (``connect_timeout_seconds``) before failing; the runner now probes the server within what is left of its bound.

    Mid-run the server goes away (the runner reaches it through a proxy the test closes), and the driver does not
    retry on its own, so the batch's write usually fails at once (on a loaded machine it may wait the selection out:
    the one request the docs allow that). The request that ends the run must have waited no longer than the bound
    (at least the probe's floor), not the selection's 60 s; and no other request made after the server went (the
    lease's renewal and release, the client's endSessions at close) may wait the 60 s either: the driver's
    server-selection log says how long each was given."""
    side = types.SimpleNamespace(waiting=threading.Event(), go=threading.Event())
    monkeypatch.setitem(sys.modules, "mongoshift_test_gone", side)
    await seed(standalone_db.people, 120)
    address = urlsplit(standalone_project.uri).netloc.rsplit("@", 1)[-1].split(",")[0]
    host, _, port = address.rpartition(":")
    proxy = Proxy(host.strip("[]"), int(port))
    standalone_project.uri = f"mongodb://127.0.0.1:{await proxy.start()}/?directConnection=true&retryReads=false&retryWrites=false"
    standalone_project.write_config(
        background_lease_ttl_seconds=2, background_poll_seconds=0.2, background_reconnect_seconds=0.5, connect_timeout_seconds=60
    )
    standalone_project.add(NAME, HELD_AT_SECOND_BATCH)
    s = standalone_project.settings()
    await command.up(s)
    run = asyncio.create_task(bg.run(s, [NAME]))
    try:
        await until("the lane holds its second batch", lambda: side.waiting.is_set() or run.done())
        caplog.set_level(logging.DEBUG, logger="pymongo.serverSelection")
        await proxy.gone()
        side.go.set()
        with pytest.raises(MongoshiftError) as caught:
            await run
    finally:
        side.go.set()
    assert caught.value.exit_code == 5, caught.value
    cause = caught.value.__cause__
    assert isinstance(cause, ServerSelectionTimeoutError), repr(cause)
    waited = _SELECTION_WAITED.search(str(cause))
    assert waited is not None and float(waited.group(1)) <= max(PROBE_FLOOR_S, 0.5), str(cause)[:200]
    given: dict[tuple[str, str], int] = {}  # the most each request (by its operation id) was given to find a server
    for record in caplog.records:
        if record.name == "pymongo.serverSelection" and (m := _GIVEN.search(text := record.getMessage())):
            operation = _OPERATION_ID.search(text)  # none for some requests: each such record its own
            kind = _OPERATION.search(text)
            key = (operation.group(1) if operation is not None else f"record {id(record)}", kind.group(1) if kind else "")
            given[key] = max(given.get(key, 0), int(m.group(1)))
    bound = 1000 * max(PROBE_FLOOR_S, 0.5, RELEASE_AFTER_LOSS_S, CLOSE_WAIT_S, 2)  # 2: the lease's TTL
    # The request that meets the outage may wait out the selection (docs/background.md, "Riding out a lost
    # connection"): on a loaded machine the driver's monitor can take the server for lost before the batch's write
    # is sent, which then waits connect_timeout_seconds instead of failing on its cut connection. Every other one
    # (made once the runner saw the failure, or bounded by what it is: the lease's renewal) keeps to the bound.
    # (pymongo names a bulk_write's request "insert", whatever its operations are.)
    over = [(kind, ms) for (_, kind), ms in given.items() if ms > bound]
    assert given and len(over) <= 1 and all(kind == "insert" and ms <= 60_000 for kind, ms in over), sorted(given.items())
