"""Where one ``pipeline=`` engine run's time goes, end to end: the server's CPU by command, the client's CPU, the waits.

Run from the repository root::

    python bench/pipeline_breakdown.py                   # 20,000 documents, 3 rounds, this checkout
    python bench/pipeline_breakdown.py --size 20000 --rounds 1 --src OTHER/src
    python bench/pipeline_breakdown.py --b3                # the B3 loop of bench/background.py, counted alike

It is a script, not a timed test. Each round starts its own embedded server (the given tree's ``src`` first on
``PYTHONPATH``) in a process that counts, on the engine's thread, the CPU seconds each command takes
(``time.thread_time`` around every step of the command's coroutine, so a command that waits is charged only for
its own steps), by command name and collection (the lane's boundary ``find`` on the migrated collection is told
from the engine's ``find`` on its state). It seeds bench/background.py's documents, registers its ``pipeline=``
migration (untimed), then runs ``background run`` as bench/background.py's engine row does and prints, for the
run: its wall seconds, the client's CPU seconds (this process), the server's CPU seconds (``/proc``) and, of
those, the seconds inside commands by command, with counts; CPU seconds do not grow with the machine's load as
wall seconds do. Every document is verified at version 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pymongo import MongoClient

import background as bench  # bench/background.py: the same documents, pipeline and project

HERE = Path(__file__).resolve().parent

SERVER = r'''
import collections, contextvars, cProfile, json, os, signal, sys, time
from mongoshift.embedded import patches
from mongoshift.embedded.engine_thread import EngineThread
from mongoshift.embedded.patches import loops
patches.apply()
from mongoeco.wire.proxy import AsyncMongoEcoProxyServer

NAME = contextvars.ContextVar("name", default="?")
PROFILED = set(filter(None, os.environ.get("BREAKDOWN_PROFILE", "").split(",")))
PROFILER = cProfile.Profile() if PROFILED else None
CPU = collections.Counter()
COUNT = collections.Counter()

def label(header, payload):
    name = loops.command_name(header.op_code, payload)
    if name is None:
        return "?"
    first = loops._first_key(payload, 5) if header.op_code == 2013 else None
    if first is not None and payload[first[1] - len(name) - 2] == 0x02:  # a string value: the collection
        start = first[1]
        size = int.from_bytes(payload[start:start + 4], "little")
        return name + " " + payload[start + 4:start + 3 + size].decode("utf-8", "replace")
    return name

dispatch = AsyncMongoEcoProxyServer._dispatch_wire_request
async def named(self, header, payload, *, connection):
    NAME.set(label(header, payload))
    return await dispatch(self, header, payload, connection=connection)
AsyncMongoEcoProxyServer._dispatch_wire_request = named

class Timed:
    def __init__(self, coroutine, name):
        self.coroutine, self.name = coroutine, name
    def __await__(self):
        value, error = None, None
        profiler = PROFILER if self.name in PROFILED else None
        while True:
            if profiler is not None:
                profiler.enable()
            began = time.thread_time()
            try:
                step = self.coroutine.throw(error) if error is not None else self.coroutine.send(value)
            except StopIteration as stop:
                if profiler is not None:
                    profiler.disable()
                CPU[self.name] += time.thread_time() - began
                COUNT[self.name] += 1
                return stop.value
            except BaseException:
                if profiler is not None:
                    profiler.disable()
                CPU[self.name] += time.thread_time() - began
                COUNT[self.name] += 1
                raise
            if profiler is not None:
                profiler.disable()
            CPU[self.name] += time.thread_time() - began
            try:
                value, error = (yield step), None
            except BaseException as caught:
                value, error = None, caught

run = EngineThread.run
async def timed_run(self, coroutine):
    name = NAME.get()
    async def inner():
        return await Timed(coroutine, name)
    return await run(self, inner())
EngineThread.run = timed_run

def reset(*_):
    CPU.clear(); COUNT.clear()
def dump(*_):
    if PROFILER is not None:
        PROFILER.dump_stats(sys.argv[1] + ".prof")
    with open(sys.argv[1], "w") as out:
        json.dump({"cpu": dict(CPU), "count": dict(COUNT)}, out)
signal.signal(signal.SIGUSR1, reset)
signal.signal(signal.SIGUSR2, dump)
from mongoshift.embedded.__main__ import main
sys.exit(main(["--port", "0", "--log-level", "WARNING"]))
'''


def process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_round(src: Path, size: int, profile: Path | None = None, commands: str = "", b3: bool = False) -> dict[str, Any]:
    from mongoshift.api import background as bg, migrations as command
    from mongoshift.project.settings import load_settings

    env = dict(os.environ, PYTHONPATH=str(src.resolve()), BREAKDOWN_PROFILE=commands if profile else "")
    with tempfile.TemporaryDirectory(prefix="mongoshift-breakdown-") as tmp:
        stats = Path(tmp) / "stats.json"
        server = subprocess.Popen([sys.executable, "-c", SERVER, str(stats)], stdout=subprocess.PIPE, env=env, text=True)
        try:
            assert server.stdout is not None
            uri = server.stdout.readline().strip()
            client: MongoClient[Any] = MongoClient(uri, **bench.CLIENT_OPTIONS)
            bench.seed(client, "breakdown", size)
            project = bench.write_project(Path(tmp), uri, "breakdown", 1, True, False)
            settings = load_settings({}, config_path=project / "mongoshift.toml", environ={})
            marks: dict[str, float] = {}

            async def run() -> tuple[float, float, float]:
                if b3:
                    from pymongo import AsyncMongoClient

                    loop_client: AsyncMongoClient[Any] = AsyncMongoClient(uri, **bench.CLIENT_OPTIONS)
                    await loop_client.admin.command("ping")
                else:
                    await command.up(settings)
                os.kill(server.pid, signal.SIGUSR1)
                await asyncio.sleep(0.2)  # the signal is handled by the server's main thread between its steps
                server_before, cpu_before, began = process_cpu(server.pid), time.process_time(), time.perf_counter()
                if b3:  # bench/background.py's B3 loop, for comparison
                    await bench._keyset(loop_client["breakdown"], size, guarded=True)
                    measured = time.perf_counter() - began, time.process_time() - cpu_before, process_cpu(server.pid) - server_before
                    await loop_client.close()
                    return measured

                def observe(event: Any) -> None:
                    at = time.perf_counter() - began
                    if event.kind == "batch":
                        marks.setdefault("first batch", at)
                        marks["last batch"] = at
                    else:
                        marks.setdefault(event.kind, at)

                await bg.run(settings, ["0001_bench.py"], observers=[observe])
                return time.perf_counter() - began, time.process_time() - cpu_before, process_cpu(server.pid) - server_before

            wall, client_cpu, server_cpu = asyncio.run(run())
            os.kill(server.pid, signal.SIGUSR2)
            for _ in range(100):
                if stats.exists() and stats.stat().st_size:
                    break
                time.sleep(0.05)
            done = client["breakdown"][bench.COLLECTION].count_documents({"__v": 2})
            if done != size:
                raise SystemExit(f"{done} of {size} at version 2")
            client.close()
            by_command = json.loads(stats.read_text())
            if profile is not None and Path(str(stats) + ".prof").exists():
                Path(str(stats) + ".prof").replace(profile)
        finally:
            server.terminate()
            server.wait()
    return {"wall": wall, "client cpu": client_cpu, "server cpu": server_cpu, "marks": marks, **by_command}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", type=Path, help="cProfile the server's steps of --commands into this file (the last round's)")
    parser.add_argument("--commands", default="update docs,commitTransaction", help="the commands --profile covers, by the names printed")
    parser.add_argument("--b3", action="store_true", help="bench/background.py's B3 loop instead of the engine (the same server, counted alike)")
    parser.add_argument("--src", type=Path, default=HERE.parent / "src", help="the source tree whose server and engine run")
    args = parser.parse_args()
    sys.path.insert(0, str(args.src.resolve()))
    load = os.getloadavg()[0]
    rounds = [one_round(args.src, args.size, args.profile, args.commands, args.b3) for _ in range(args.rounds)]
    what = "B3" if args.b3 else "engine pipeline=, one lane"
    print(f"{args.src}: {what}, {args.size:,} documents, {args.rounds} round(s), load {load:.1f} → {os.getloadavg()[0]:.1f}")
    for key in ("wall", "client cpu", "server cpu"):
        print(f"  {key:<34} " + ", ".join(f"{r[key]:.3f}" for r in rounds) + f"  (median {statistics.median(r[key] for r in rounds):.3f} s)")
    inside = [sum(r["cpu"].values()) for r in rounds]
    print(f"  {'server cpu inside commands':<34} " + ", ".join(f"{v:.3f}" for v in inside))
    for mark in rounds[0]["marks"]:
        print(f"  at {mark:<31} " + ", ".join(f"{r['marks'].get(mark, float('nan')):.3f}" for r in rounds))
    names = sorted({n for r in rounds for n in r["cpu"]}, key=lambda n: -statistics.median(r["cpu"].get(n, 0.0) for r in rounds))
    print(f"  {'command':<40} {'count':>6} {'server CPU s (rounds)':>24} {'µs a document':>14}")
    for name in names:
        cpus = [r["cpu"].get(name, 0.0) for r in rounds]
        print(f"  {name:<40} {rounds[0]['count'].get(name, 0):>6} {', '.join(f'{c:.3f}' for c in cpus):>24} "
              f"{statistics.median(cpus) / args.size * 1e6:>14.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
