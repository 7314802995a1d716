"""Benchmark: the migration line's own overhead, against raw pymongo doing the same writes and reads.

Run from the repository root::

    python bench/line.py                              # own embedded server, 500 migrations, 2,000 applied
    python bench/line.py --migrations 200 --applied 500 --json out.json
    python bench/line.py --uri mongodb://host/?replicaSet=rs   # throwaway databases, dropped

It is a script, not a timed test: it prints a table and verdicts and stops by itself.

What is compared:

* **raw up**  a hand-written loop over the same N names: one ``update_one`` per name
  with the changelog record ``up`` writes (same fields, same pipeline update, upsert, the
  client's default write concern), on pymongo's async client as mongoshift uses it.
* **mongoshift up**  ``mongoshift.api.up`` over N files ``def up(ctx): pass``: session,
  own-collection check, indexes, lock, planning, import of every file, then the line.
* **raw status**  one ``find`` of the whole changelog (sorted by name), read to the end.
* **mongoshift status**  ``mongoshift.api.status`` over as many applied files: discovery,
  the own-collection check, the changelog read and a checksum per applied file.

Both sides of a pair open their client, ping it and close it inside the timed section.
The overhead per migration is (mongoshift - raw) / N; round trips are counted with
pymongo's command monitoring in the measured process (heartbeats are not commands).

Every measurement runs in a fresh child process (``getrusage`` is per process and only
grows), in a fresh database for ``up``; ``--repeat`` runs each pair that many times,
alternating, and the table shows the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pymongo import MongoClient, monitoring

from _server import server_uri  # bench/_server.py (scripts run from bench/)

CHANGELOG = "_mongoshift_migrations"
#: Targets of issue 11, per migration of ``up``: overhead over the raw loop.
TARGET_RT = 3.0  # round trips per migration, mongoshift's own (the record's write included)
TARGET_CPU_MS = 5.0  # client CPU per migration, over the raw loop
CHILD_TIMEOUT_S = 1800
TRIVIAL = "def up(ctx):\n    pass\n"


# ---------------------------------------------------------------------------------------------
# Child side: one measurement in its own process
# ---------------------------------------------------------------------------------------------


class Counter(monitoring.CommandListener):
    """Counts the commands this process sends: every one is a round trip."""

    def __init__(self) -> None:
        self.by_name: dict[str, int] = {}

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.by_name[event.command_name] = self.by_name.get(event.command_name, 0) + 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    @property
    def total(self) -> int:
        return sum(self.by_name.values())


@dataclass
class Measure:
    wall_s: float = 0.0
    cpu_s: float = 0.0
    round_trips: int = 0
    commands: dict[str, int] = field(default_factory=dict)
    count: int = 0  # migrations applied / rows read: checked against what was asked


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _client_options() -> dict[str, Any]:
    # The options mongoshift's connect() gives its client (project.connection.client_options).
    return {"serverSelectionTimeoutMS": 60_000, "connectTimeoutMS": 60_000, "appname": "mongoshift", "tz_aware": True}


def _names(count: int) -> list[str]:
    return [f"{i:06d}_m.py" for i in range(1, count + 1)]


async def _raw_up(uri: str, db_name: str, count: int, run_id: str) -> int:
    from pymongo import AsyncMongoClient

    client: AsyncMongoClient[Any] = AsyncMongoClient(uri, **_client_options())
    try:
        await client.admin.command("ping")
        changelog = client[db_name][CHANGELOG]
        checksum = hashlib.sha256(TRIVIAL.encode()).hexdigest()
        for name in _names(count):
            started = time.monotonic()
            fields = {
                "name": {"$literal": name},
                "kind": "migration",
                "status": "applied",
                "batch": 1,
                "checksum": {"$literal": checksum},
                "duration_ms": int((time.monotonic() - started) * 1000),
                "run_id": {"$literal": run_id},
                "executed_by": {"$literal": "bench"},
                "host": {"$literal": "bench"},
                "environment": {"$literal": "production"},
                "description": {"$literal": None},
                "applied_at": "$$NOW",
                "first_applied_at": {"$ifNull": ["$first_applied_at", "$$NOW"]},
            }
            await changelog.update_one(
                {"name": name}, [{"$set": fields}, {"$unset": ["reverted_at", "error", "failed_checksum"]}], upsert=True
            )
        return count
    finally:
        await client.close()


async def _raw_status(uri: str, db_name: str) -> int:
    from pymongo import AsyncMongoClient

    client: AsyncMongoClient[Any] = AsyncMongoClient(uri, **_client_options())
    try:
        await client.admin.command("ping")
        docs = await client[db_name][CHANGELOG].find({}, sort=[("name", 1)]).to_list()
        return len(docs)
    finally:
        await client.close()


async def _mongoshift(kind: str, project: Path, uri: str, db_name: str) -> int:
    from mongoshift import api  # loaded by child() before the clock starts

    settings = api.load_settings({"uri": uri, "db": db_name}, config_path=project / "mongoshift.toml")
    if kind == "up":
        report = await api.up(settings)
        return sum(1 for r in report.results if r.status == "applied")
    rows = await api.status(settings)
    return sum(1 for r in rows if r.state == "applied" and r.checksum == "ok")


def child(args: argparse.Namespace) -> Measure:
    counter = Counter()
    monitoring.register(counter)  # before any client exists: every client of this process reports
    # Imports stay outside the timed section, as the raw side's pymongo does; the API imports
    # some modules only when a command uses them (start-up time), so those are named here.
    import pymongo.asynchronous.mongo_client  # noqa: F401

    if args.child.startswith("mongoshift"):
        import mongoshift.api.migrations
        import mongoshift.line.executor
        import mongoshift.project.settings  # noqa: F401

    kind = args.child.split("-", 1)[1]
    if args.child == "raw-up":
        work = _raw_up(args.uri, args.db, args.migrations, uuid.uuid4().hex)
    elif args.child == "raw-status":
        work = _raw_status(args.uri, args.db)
    else:
        work = _mongoshift(kind, args.project, args.uri, args.db)
    cpu0, wall0 = _cpu(), time.perf_counter()
    count = asyncio.run(work)
    wall, cpu = time.perf_counter() - wall0, _cpu() - cpu0
    return Measure(wall, cpu, counter.total, dict(sorted(counter.by_name.items())), count)


# ---------------------------------------------------------------------------------------------
# Parent side: projects, data, children, table
# ---------------------------------------------------------------------------------------------


def write_project(root: Path, count: int) -> Path:
    project = root / f"line-{count}"
    migrations = project / "migrations"
    migrations.mkdir(parents=True)
    (project / "mongoshift.toml").write_text(
        f'[mongoshift]\nmigrations_dir = {json.dumps(str(migrations))}\nconnect_timeout_seconds = 60\n', encoding="utf-8"
    )
    for name in _names(count):
        (migrations / name).write_text(TRIVIAL, encoding="utf-8")
    return project


def seed_applied(client: MongoClient[Any], db_name: str, count: int) -> None:
    """``count`` applied records, as ``up`` writes them, whose checksums match the files."""
    checksum = hashlib.sha256(TRIVIAL.encode()).hexdigest()
    now = datetime.now(UTC)
    docs = [
        {
            "name": name,
            "kind": "migration",
            "status": "applied",
            "batch": 1 + i // 100,
            "checksum": checksum,
            "duration_ms": 1,
            "run_id": "seed",
            "executed_by": "bench",
            "host": "bench",
            "environment": "production",
            "description": None,
            "applied_at": now,
            "first_applied_at": now,
        }
        for i, name in enumerate(_names(count))
    ]
    client[db_name][CHANGELOG].insert_many(docs)


def run_child(name: str, uri: str, db_name: str, project: Path | None, migrations: int) -> Measure:
    args = [sys.executable, __file__, "--child", name, "--uri", uri, "--db", db_name, "--migrations", str(migrations)]
    if project is not None:
        args += ["--project", str(project)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return Measure(**json.loads(done.stdout.strip().splitlines()[-1]))


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def median(measures: list[Measure]) -> Measure:
    return Measure(
        wall_s=statistics.median(m.wall_s for m in measures),
        cpu_s=statistics.median(m.cpu_s for m in measures),
        round_trips=int(statistics.median(m.round_trips for m in measures)),
        commands=measures[0].commands,
        count=min(m.count for m in measures),
    )


def run_all(uri: str, args: argparse.Namespace) -> dict[str, Any]:
    client: MongoClient[Any] = MongoClient(uri, **_client_options())
    runs: dict[str, list[Measure]] = {"raw-up": [], "mongoshift-up": [], "raw-status": [], "mongoshift-status": []}
    with tempfile.TemporaryDirectory(prefix="mongoshift-bench-line-") as tmp:
        up_project = write_project(Path(tmp), args.migrations)
        status_project = write_project(Path(tmp) / "status", args.applied)
        status_db = f"mongoshift_bench_{uuid.uuid4().hex[:8]}"
        seed_applied(client, status_db, args.applied)
        try:
            for round_ in range(args.repeat):
                for name in ("raw-up", "mongoshift-up"):
                    db_name = f"mongoshift_bench_{uuid.uuid4().hex[:8]}"
                    try:
                        runs[name].append(run_child(name, uri, db_name, up_project, args.migrations))
                    finally:
                        client.drop_database(db_name)
                    log(f"round {round_ + 1}: {name} {runs[name][-1].wall_s:.2f} s")
                for name in ("raw-status", "mongoshift-status"):
                    runs[name].append(run_child(name, uri, status_db, status_project, args.applied))
                    log(f"round {round_ + 1}: {name} {runs[name][-1].wall_s:.2f} s")
        finally:
            client.drop_database(status_db)
            client.close()
    return {name: median(measures) for name, measures in runs.items()} | {"_runs": runs}


def render(result: dict[str, Any], args: argparse.Namespace) -> tuple[str, bool]:
    lines = [f"{'scenario':<22} {'n':>6} {'wall s':>8} {'CPU s':>8} {'round trips':>12}  {'vs raw (wall / CPU / RT)':>26}"]
    ok = True
    verdicts = []
    for kind, n in (("up", args.migrations), ("status", args.applied)):
        raw, ours = result[f"raw-{kind}"], result[f"mongoshift-{kind}"]
        for label, m in ((f"raw {kind}", raw), (f"mongoshift {kind}", ours)):
            ratio = ""
            if m is ours:
                ratio = f"{ours.wall_s / raw.wall_s:.2f}x / {ours.cpu_s / raw.cpu_s:.2f}x / {ours.round_trips / max(raw.round_trips, 1):.2f}x"
            lines.append(f"{label:<22} {n:>6} {m.wall_s:>8.3f} {m.cpu_s:>8.3f} {m.round_trips:>12}  {ratio:>26}")
        if ours.count != n or raw.count != n:
            ok = False
            verdicts.append(f"INVALID {kind}: mongoshift counted {ours.count}, raw {raw.count}, expected {n}")
        wall_ms = (ours.wall_s - raw.wall_s) * 1000 / n
        cpu_ms = (ours.cpu_s - raw.cpu_s) * 1000 / n
        rt = ours.round_trips / n
        extra_rt = (ours.round_trips - raw.round_trips) / n
        line = (
            f"{kind}: per {'migration' if kind == 'up' else 'file'} over raw: {wall_ms:+.2f} ms wall, {cpu_ms:+.2f} ms CPU, "
            f"{extra_rt:+.3f} round trips ({rt:.3f} in all)"
        )
        if kind == "up":
            met = cpu_ms <= TARGET_CPU_MS and rt <= TARGET_RT
            ok = ok and met
            line += f"  [target <= {TARGET_RT:g} RT and <= {TARGET_CPU_MS:g} ms CPU: {'met' if met else 'MISSED'}]"
        verdicts.append(line)
    lines.append("")
    lines += verdicts
    lines.append("")
    lines.append("commands sent by mongoshift up:     " + json.dumps(result["mongoshift-up"].commands))
    lines.append("commands sent by mongoshift status: " + json.dumps(result["mongoshift-status"].commands))
    return "\n".join(lines), ok


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--uri", help="use this server (throwaway databases, dropped at the end) instead of an embedded one")
    parser.add_argument("--migrations", type=int, default=500, help="trivial migrations that 'up' applies (default 500)")
    parser.add_argument("--applied", type=int, default=2000, help="applied files that 'status' reads (default 2000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each scenario; the table shows medians (default 3)")
    parser.add_argument("--json", type=Path, help="also write the measures (medians and every run) to this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--project", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(asdict(child(args))), flush=True)
        return 0
    started = time.perf_counter()
    with ExitStack() as stack:
        uri = server_uri(stack, args.uri)
        result = run_all(uri, args)
    table, ok = render(result, args)
    print(textwrap.dedent(f"""
        mongoshift line benchmark: up over {args.migrations} trivial migrations, status over {args.applied} applied files,
        median of {args.repeat}, {'server given by --uri' if args.uri else 'embedded server (mongoeco)'}, {os.cpu_count()} CPUs,
        Python {sys.version.split()[0]}, {time.perf_counter() - started:.0f} s in all
    """).strip())
    print()
    print(table)
    if args.json:
        runs = result.pop("_runs")
        body = {k: asdict(v) for k, v in result.items()} | {"runs": {k: [asdict(m) for m in v] for k, v in runs.items()}}
        args.json.write_text(json.dumps(body, indent=2), encoding="utf-8")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
