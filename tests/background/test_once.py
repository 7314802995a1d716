"""``background run --once``: one bounded round of slices, for cron jobs and Kubernetes Jobs."""

from __future__ import annotations

import json

from mongoshift.api import background as bg, migrations as command

from .conftest import background_file, seed

#: One lane whose slice (1 s) holds about three batches of 50 (a 400 ms pause between them): a
#: round rewrites far fewer than the 400 documents.
SLOW = background_file(batch_size=50, extra="pause_ms=400, slice_ms=1000, adaptive=False,").replace("pause_ms=0,", "")


def _migrated(sync_client, project) -> int:  # type: ignore[no-untyped-def]
    return int(sync_client[project.db].people.count_documents({"__v": 2}))


def test_rounds_continue_where_the_last_stopped_and_the_last_exits_0(fast_project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    sync_client[fast_project.db].people.insert_many([{"_id": i, "first": "a", "last": "b", "__v": 1, "__rev": 1} for i in range(400)])
    fast_project.add("0001_names.py", SLOW)
    assert cli(fast_project, "up").returncode == 0

    first = cli(fast_project, "background", "run", "0001_names", "--once", "--json")
    assert first.returncode == 31, first.stderr[-2000:]  # background_pending: work remains
    error = json.loads(first.stdout)["error"]
    assert error["kind"] == "background_pending" and error["details"]["remaining"] == ["0001_names.py"]
    (report,) = error["details"]["background"]
    assert report["status"] == "running" and report["remaining"] > 0
    done = _migrated(sync_client, fast_project)
    assert 0 < done < 400

    codes = []
    for _ in range(15):
        result = cli(fast_project, "background", "run", "0001_names", "--once", "--json")
        codes.append(result.returncode)
        now = _migrated(sync_client, fast_project)
        # each round goes on from the checkpoints; the second always has more to write (a round of
        # three batches never ends a partition of 200 or more without noticing), a later one may only close it
        assert now > done if len(codes) == 1 else now >= done
        done = now
        if result.returncode != 31:
            break
    assert codes[0] == 31 and codes[-1] == 0, codes  # at least a second round with work left, then done
    assert json.loads(result.stdout)["background"][0]["status"] == "completed"
    assert sync_client[fast_project.db].people.count_documents({"__v": 2, "__rev": 2}) == 400  # each rewritten once


async def test_the_api_runs_one_round_and_returns_what_is_left(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 400)
    fast_project.add("0001_names.py", SLOW)
    await command.up(fast_project.settings())
    (report,) = await bg.run(fast_project.settings(), once=True)
    assert report.status == "running" and report.remaining > 0
    assert 0 < await db.people.count_documents({"__v": 2}) < 400
    for _ in range(20):
        (report,) = await bg.run(fast_project.settings(), ["0001_names.py"], once=True)
        if report.status != "running":
            break
    assert report.status == "completed" and report.remaining == 0
    assert await db.people.count_documents({"__v": 2}) == 400


def test_a_paused_migration_keeps_exit_36_with_once(fast_project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    sync_client[fast_project.db].people.insert_many([{"_id": i, "first": "a", "last": "b", "__v": 1, "__rev": 1} for i in range(10)])
    fast_project.add("0001_names.py", SLOW)
    assert cli(fast_project, "up").returncode == 0
    assert cli(fast_project, "background", "pause", "0001_names").returncode == 0
    assert cli(fast_project, "background", "run", "--all", "--once").returncode == 0  # nothing runnable
    assert cli(fast_project, "background", "run", "0001_names", "--once").returncode == 36


def test_a_round_goes_on_to_the_next_partition_while_its_slice_has_time(fast_project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """A round is one slice's time per lane (``slice_ms``, an hour here: no clock decides), not one partition: a lane that
    finished its partition in a moment used to end the round there, so a cron job needed a round per partition."""
    sync_client[fast_project.db].people.insert_many([{"_id": i, "first": "a", "last": "b", "__v": 1, "__rev": 1} for i in range(200)])
    # max_parallel=2 cuts the pass in 2 x 4 partitions; the round runs one lane
    extra = "adaptive=False, slice_ms=3_600_000, partitions=Partitions(over_partition=4, min_partition_docs=10),"
    source = background_file(batch_size=10, max_parallel=2, extra=extra)
    fast_project.add("0001_names.py", source.replace("import Background", "import Background, Partitions"))
    assert cli(fast_project, "up").returncode == 0

    result = cli(fast_project, "background", "run", "0001_names", "--once", "--concurrency", "1", "--json")
    assert result.returncode == 0, result.stderr[-2000:]  # every partition in one round: nothing left
    (report,) = json.loads(result.stdout)["background"]
    assert report["status"] == "completed" and report["partitions_total"] == 8, {k: report[k] for k in ("partitions_total", "pass_number")}
    assert report["totals"]["migrated"] == 200 == _migrated(sync_client, fast_project)
