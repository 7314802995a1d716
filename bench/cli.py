"""Benchmark: start-up time of the command line, against ``python -c "import pymongo"``.

Run from the repository root::

    python bench/cli.py                     # own embedded server, median of 15 runs
    python bench/cli.py --runs 31 --json out.json
    python bench/cli.py --uri mongodb://host/?replicaSet=rs   # a throwaway database, dropped

It is a script, not a timed test: it prints a table and a verdict and stops by itself.

What is timed (wall time of the whole process, median of ``--runs``, the commands
interleaved so that a noisy neighbour slows them alike):

* ``python -c "pass"``             the interpreter alone (for reference)
* ``python -c "import pymongo"``   the baseline: any tool on the driver pays this much
* ``mongoshift --help``            target: at most 1.3 x the baseline
* ``mongoshift status``            against a small project (5 applied files); it connects,
  so it also pays the driver, a ping and the changelog read

``mongoshift`` is the console script installed next to this Python (else ``python -m
mongoshift``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from _server import server_uri  # bench/_server.py (scripts run from bench/)

TARGET_HELP = 1.3  # mongoshift --help <= 1.3 x python -c "import pymongo"
FILES = 5


def mongoshift_command() -> list[str]:
    script = Path(sys.executable).parent / "mongoshift"
    return [str(script)] if script.exists() else [sys.executable, "-m", "mongoshift"]


def write_project(root: Path, uri: str, db_name: str) -> Path:
    project = root / "project"
    migrations = project / "migrations"
    migrations.mkdir(parents=True)
    config = {"uri": uri, "db": db_name, "migrations_dir": "migrations", "connect_timeout_seconds": 60}
    lines = ["[mongoshift]", *(f"{k} = {json.dumps(v)}" for k, v in config.items())]
    (project / "mongoshift.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for i in range(1, FILES + 1):
        (migrations / f"{i:04d}_m.py").write_text("def up(ctx):\n    pass\n", encoding="utf-8")
    return project


def timed(args: list[str], cwd: Path) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOSHIFT_")}
    started = time.perf_counter()
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return wall


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run_all(uri: str, runs: int) -> dict[str, list[float]]:
    from pymongo import MongoClient

    ms = mongoshift_command()
    db_name = f"mongoshift_bench_{uuid.uuid4().hex[:8]}"
    client: MongoClient[Any] = MongoClient(uri, serverSelectionTimeoutMS=60_000)
    try:
        with tempfile.TemporaryDirectory(prefix="mongoshift-bench-cli-") as tmp:
            project = write_project(Path(tmp), uri, db_name)
            timed([*ms, "up"], project)  # the status below reads applied files
            commands = {
                'python -c "pass"': [sys.executable, "-c", "pass"],
                'python -c "import pymongo"': [sys.executable, "-c", "import pymongo"],
                "mongoshift --help": [*ms, "--help"],
                "mongoshift status": [*ms, "status"],
            }
            for args in commands.values():  # warm the file cache and the bytecode once
                timed(args, project)
            walls: dict[str, list[float]] = {name: [] for name in commands}
            for i in range(runs):
                for name, args in commands.items():
                    walls[name].append(timed(args, project))
                if (i + 1) % 5 == 0:
                    log(f"{i + 1}/{runs} runs")
            return walls
    finally:
        client.drop_database(db_name)
        client.close()


def render(walls: dict[str, list[float]]) -> tuple[str, bool]:
    base = statistics.median(walls['python -c "import pymongo"'])
    lines = [f"{'command':<30} {'median ms':>10} {'min ms':>8} {'max ms':>8} {'vs import pymongo':>18}"]
    for name, values in walls.items():
        median = statistics.median(values)
        lines.append(f"{name:<30} {median * 1000:>10.0f} {min(values) * 1000:>8.0f} {max(values) * 1000:>8.0f} {median / base:>17.2f}x")
    ratio = statistics.median(walls["mongoshift --help"]) / base
    met = ratio <= TARGET_HELP
    lines += ["", f"mongoshift --help: {ratio:.2f}x python -c \"import pymongo\" [target <= {TARGET_HELP:g}x: {'met' if met else 'MISSED'}]"]
    return "\n".join(lines), met


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--uri", help="use this server (a throwaway database, dropped at the end) instead of an embedded one")
    parser.add_argument("--runs", type=int, default=15, help="runs of each command; the table shows medians (default 15)")
    parser.add_argument("--json", type=Path, help="also write every wall time (seconds) to this file")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    with ExitStack() as stack:
        uri = server_uri(stack, args.uri)
        walls = run_all(uri, args.runs)
    table, met = render(walls)
    print(textwrap.dedent(f"""
        mongoshift CLI start-up benchmark: median of {args.runs} runs, {' '.join(mongoshift_command())},
        {'server given by --uri' if args.uri else 'embedded server (mongoeco)'}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]},
        {time.perf_counter() - started:.0f} s in all
    """).strip())
    print()
    print(table)
    if args.json:
        args.json.write_text(json.dumps(walls, indent=2), encoding="utf-8")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
