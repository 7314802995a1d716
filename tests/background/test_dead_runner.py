"""A runner started again after ``kill -9`` goes on at once with the partitions the dead one held.

Found in a user trial: the dead runner's leases stayed until their TTL (``background_lease_ttl_seconds``, 30 s by
default) lapsed, so the runner started in its place sat idle that long, though the holder was provably gone: a process
of this host whose pid no longer runs. Such leases are now freed when a lane finds nothing else to claim.
"""

from __future__ import annotations

import os
import socket

from mongoshift.api import background as bg, migrations as command
from mongoshift.background.state.events import Event

from ..conftest import reaped, start_cli, until
from .conftest import background_file, seed

NAME = "0001_names.py"


async def test_a_runner_started_after_a_kill_9_takes_over_the_dead_ones_leases_at_once(project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 60)
    # A TTL no test waits out: without the take-over, the partition stays leased to the dead process.
    project.write_config(background_lease_ttl_seconds=600, background_poll_seconds=0.2)
    holding = project.root / "holding"
    # The other process holds its first batch for ever (this one, whose pid the file names, goes through).
    source = background_file(batch_size=20).replace(
        "def migrate(doc, ctx):\n",
        f"def migrate(doc, ctx):\n    import os, pathlib, time\n    if os.getpid() != {os.getpid()}:\n"
        f"        pathlib.Path({str(holding)!r}).touch()\n        time.sleep(3600)\n",
    )
    project.add(NAME, source)
    await command.up(project.settings())
    with reaped(start_cli(project, "background", "run", "0001_names")) as victim:
        await until("the other runner holds a lease, in its transform", lambda: holding.exists() or victim.poll() is not None)
        assert victim.poll() is None, victim.communicate()
        victim.kill()
        victim.communicate()
    partitions = db["_mongoshift_background_partitions"]
    assert await partitions.count_documents({"lease": {"$exists": True}}) == 1  # the dead runner's, live for 600 s
    events: list[Event] = []
    (report,) = await bg.run(project.settings(), [NAME], once=True, observers=[events.append])
    assert [(e.data["leases"], e.data.get("holder")) for e in events if e.kind == "reclaimed"] == [(1, "died")]
    assert await db.people.count_documents({"__v": 2}) > 0, report
    assert await partitions.count_documents({"reclaims": 1}) == 1


async def test_a_lease_of_a_live_process_is_left_alone(project, db) -> None:  # type: ignore[no-untyped-def]
    """This process's own pid, and one of another host, are never taken for dead."""
    from mongoshift.project.lock import process_gone, process_identity

    assert not process_gone(socket.gethostname(), os.getpid(), process_identity())
    assert not process_gone("another-host.example", 1, None)
    assert not process_gone(socket.gethostname(), True, None)  # a boolean is no pid
