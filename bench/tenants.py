"""Benchmark: ``up`` across many tenant databases (issue 28, item 10), against one database.

Run from the repository root::

    python bench/tenants.py                                   # own embedded server: 200 tenants, --parallel 1, 4, 8
    python bench/tenants.py --tenants 100 --parallel 1,4 --rss 100,1000 --json out.json
    python bench/tenants.py --uri mongodb://host/?replicaSet=rs   # throwaway databases, dropped

It is a script, not a timed test: it prints a table and verdicts and stops by itself.

What is measured, each in a fresh child process (``getrusage`` is per process and only grows):

* **one database**  ``mongoshift.api.up`` of 3 small migrations on one fresh database: the
  round trips per migration of a single-database run (connect, check, lock, changelog, the
  migrations' own writes), the baseline of the figure below.
* **across N tenants**  ``mongoshift.api.up_across`` of the same 3 migrations over N fresh
  tenant databases (``[tenants] databases``), at each ``--parallel``: wall time, round trips per
  tenant per migration (target: the single-database figure + at most 1) and the client's peak
  RSS. Round trips are counted with pymongo's command monitoring (heartbeats are not commands).
* **peak RSS at ``--rss`` sizes**  the same rollout at 4 in parallel over each size (default 100
  and 1,000 tenants): the larger's peak RSS over the smaller's (target: at most 1.2).

Wall times are ratios against ``--parallel 1`` measured in the same run; on a shared machine
the absolute figures move with the neighbours, the ratios less.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from pymongo import MongoClient, monitoring

from _server import server_uri  # bench/_server.py (scripts run from bench/)

MIGRATIONS = 3
TARGET_EXTRA_RT = 1.0  # per tenant per migration, over one database's figure
TARGET_RSS = 1.2  # peak RSS at the larger --rss size over the smaller
CHILD_TIMEOUT_S = 3600
SMALL = "def up(ctx):\n    ctx.db.items.insert_one({{'step': {step}}})\n"


class Counter(monitoring.CommandListener):
    """Counts the commands this process sends: every one is a round trip."""

    def __init__(self) -> None:
        self.total = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.total += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def write_project(root: Path, uri: str, tenants: list[str]) -> Path:
    migrations = root / "migrations"
    migrations.mkdir(parents=True, exist_ok=True)
    for step in range(1, MIGRATIONS + 1):
        (migrations / f"{step:04d}_small.py").write_text(SMALL.format(step=step), encoding="utf-8")
    lines = ["[mongoshift]", f"uri = {json.dumps(uri)}", 'migrations_dir = "migrations"', "connect_timeout_seconds = 60"]
    lines += ["[mongoshift.tenants]", f"databases = {json.dumps(tenants)}"]
    config = root / "mongoshift.toml"
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return config


async def child(spec: dict[str, Any]) -> dict[str, Any]:
    from pymongo import AsyncMongoClient

    from mongoshift import api
    from mongoshift.project.settings import load_settings

    counter = Counter()
    client: AsyncMongoClient[Any] = AsyncMongoClient(spec["uri"], event_listeners=[counter])
    settings = load_settings({"db": spec["single"]} if spec["single"] else {}, config_path=Path(spec["config"]), environ={})
    try:
        started = time.perf_counter()
        if spec["single"]:
            report = await api.up(settings, client=client)
            ok, applied = True, len(report.results)
        else:
            rollout = await api.up_across(settings, api.Tenants(all=True, parallel=spec["parallel"]), client=client)
            ok, applied = rollout.ok, sum(row.applied for row in rollout.rows)
        wall = time.perf_counter() - started
    finally:
        await client.close()
    return {"wall_s": wall, "commands": counter.total, "ok": ok, "applied": applied, "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


def measure(uri: str, tenants: int, parallel: int, *, single: bool = False) -> dict[str, Any]:
    prefix = f"bt{uuid.uuid4().hex[:8]}_"
    names = [f"{prefix}{i:05d}" for i in range(tenants)]
    with tempfile.TemporaryDirectory() as folder:
        config = write_project(Path(folder), uri, names)
        spec = {"uri": uri, "config": str(config), "parallel": parallel, "single": names[0] if single else None}
        try:
            done = subprocess.run(
                [sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, cwd=folder
            )
        finally:
            with MongoClient(uri) as client:
                for name in client.list_database_names():
                    if name.startswith(prefix):
                        client.drop_database(name)
    if done.returncode != 0:
        raise SystemExit(f"measurement failed ({tenants} tenants, parallel {parallel}):\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if not result["ok"]:
        raise SystemExit(f"the rollout did not succeed ({tenants} tenants, parallel {parallel})")
    databases = 1 if single else tenants
    result.update(tenants=databases, parallel=parallel, rt_per_migration=result["commands"] / (databases * MIGRATIONS))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--uri", help="a server to measure against (default: an embedded server started here)")
    parser.add_argument("--tenants", type=int, default=200, help="tenant databases of the parallel runs (default 200)")
    parser.add_argument("--parallel", default="1,4,8", help="comma-separated --parallel values (default 1,4,8)")
    parser.add_argument("--rss", default="100,1000", help="comma-separated tenant counts for the peak-RSS comparison ('' skips it)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(json.loads(args.child)))))
        return
    with ExitStack() as stack:
        uri = server_uri(stack, args.uri)
        single = measure(uri, 1, 1, single=True)
        runs = [measure(uri, args.tenants, int(p)) for p in args.parallel.split(",") if p]
        sizes = [int(n) for n in args.rss.split(",") if n]
        rss = [measure(uri, n, 4) for n in sizes]
    base = runs[0]["wall_s"] if runs else None
    print(f"one database: {single['rt_per_migration']:.2f} round trips per migration ({MIGRATIONS} migrations, {single['commands']} commands)")
    print(f"{'tenants':>8} {'parallel':>8} {'wall s':>8} {'vs first':>9} {'tenants/s':>10} {'rt/tenant/migration':>20} {'peak RSS MiB':>13}")
    for r in [*runs, *rss]:
        ratio = f"{base / r['wall_s']:.2f}x" if base and r in runs else ""
        print(
            f"{r['tenants']:>8} {r['parallel']:>8} {r['wall_s']:>8.1f} {ratio:>9} {r['tenants'] / r['wall_s']:>10.1f} "
            f"{r['rt_per_migration']:>20.2f} {r['peak_rss_kib'] / 1024:>13.1f}"
        )
    verdicts = []
    for r in runs:
        extra = r["rt_per_migration"] - single["rt_per_migration"]
        verdicts.append(f"round trips at --parallel {r['parallel']}: +{extra:.2f} per tenant per migration (target <= +{TARGET_EXTRA_RT:g}): "
                        + ("met" if extra <= TARGET_EXTRA_RT else "MISSED"))
    if len(rss) >= 2:
        ratio = rss[-1]["peak_rss_kib"] / rss[0]["peak_rss_kib"]
        verdicts.append(f"peak RSS at {rss[-1]['tenants']} over {rss[0]['tenants']} tenants: {ratio:.2f}x (target <= {TARGET_RSS:g}x): "
                        + ("met" if ratio <= TARGET_RSS else "MISSED"))
    for line in verdicts:
        print(line)
    if args.json:
        args.json.write_text(json.dumps({"single": single, "runs": runs, "rss": rss, "verdicts": verdicts}, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
