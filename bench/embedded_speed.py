"""Benchmark: the embedded server's cost per migrated document in the B3 loop, against the server of a
baseline commit, in one run.

Run from the repository root (``python bench/embedded_speed.py``)::

    python bench/embedded_speed.py                          # 20k and 100k documents, baseline BASELINE
    python bench/embedded_speed.py --sizes 20000 --json out.json
    python bench/embedded_speed.py --baseline HEAD~3         # another commit to compare with

It is a script, not a timed test. For the baseline it checks the commit out into a temporary git
worktree, installs it with its ``embedded`` extra into a temporary venv (pip), and starts that
server; the current server is this checkout's ``src`` on this interpreter. Each server runs in its
own process, and for each size, on each server: seed (untimed), then the B3 loop of
``bench/background.py`` (keyset ``find`` of 500 documents through the version index, guarded
``UpdateOne({_id, __v, __rev})`` bulk writes, ``w: "majority"``), verified afterwards (every document
at version 2). What is measured is the server process's CPU time (user + system, from
``/proc/<pid>/stat``) during the loop, per migrated document, and the loop's docs/s.

It prints, per size, both servers' figures and the ratio of their CPU per document (target: the
current server at least 10x cheaper), and the current server's docs/s at the largest size over the
smallest (target >= 0.9: the cost does not grow with the collection). The machine's load average is
printed at the start and the end of each measurement: other work on the machine moves the docs/s
(wall time), much less the CPU per document. Linux only (``/proc``).

``--repeat N`` measures every size N times on fresh servers, the sizes in turn (each round in the
other order, so that a drift of the machine's speed during the run weighs on every size alike), and
judges the medians: on a shared machine one measurement of the same code moves by a fifth from run to
run, more than the differences the targets are about. The flatness verdict is the median of each
round's own ratio of the two sizes (measured a minute or two apart), as bench/background.py judges its
rows against B3; the ratio of the sizes' medians is printed beside it. Every measurement is still printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pymongo import AsyncMongoClient, MongoClient

import background  # bench/background.py: the same data, transform and B3 loop

ROOT = Path(__file__).resolve().parent.parent
#: main's HEAD when the issue-26 speed work started: the embedded server before fixes (ae)-(ah).
BASELINE = "8a8712aab2620732f9e3005bd8e2c6bb9a25187b"
TARGET_CPU_RATIO = 10.0  # baseline CPU per document / current CPU per document
TARGET_FLAT = 0.9  # current docs/s at the largest size / at the smallest
START_TIMEOUT_S = 120


@dataclass
class Measure:
    server: str
    size: int
    seed_s: float
    wall_s: float
    server_cpu_s: float
    migrated: int
    load_before: float
    load_after: float
    round: int = 1

    @property
    def docs_per_s(self) -> float:
        return self.migrated / self.wall_s if self.wall_s else 0.0

    @property
    def cpu_us_per_doc(self) -> float:
        return self.server_cpu_s / self.migrated * 1e6 if self.migrated else 0.0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux ``/proc/<pid>/stat``, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def server(python: str, env: dict[str, str]) -> Iterator[tuple[str, int]]:
    """``python -m mongoshift.embedded --port 0`` in ``env``; yields its URI and pid, stops it (SIGTERM)."""
    with tempfile.TemporaryFile(mode="w+") as errors:
        proc = subprocess.Popen(
            [python, "-m", "mongoshift.embedded", "--port", "0", "--log-level", "WARNING"],
            stdout=subprocess.PIPE, stderr=errors, text=True, env=env,
        )
        assert proc.stdout is not None
        uri = proc.stdout.readline().strip()
        if not uri.startswith("mongodb://"):
            proc.kill()
            proc.wait()
            errors.seek(0)
            raise RuntimeError(f"the server did not start: {errors.read()[-800:]}")
        try:
            yield uri, proc.pid
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without PYTHONPATH (it would put this checkout before the baseline's install)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(extra)
    return env


@contextmanager
def baseline_python(commit: str, keep: Path | None) -> Iterator[str]:
    """A Python with ``commit`` installed (``.[embedded]``): a git worktree and a venv in a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="mongoshift-speed-baseline-") as tmp:
        where = keep or Path(tmp)
        tree, venv = where / "tree", where / "venv"
        python = venv / "bin" / "python"
        if not python.exists():
            log(f"checking out {commit[:12]} and installing it into a temporary venv (pip) ...")
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), commit], check=True, capture_output=True)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"{tree}[embedded]"], check=True)
        try:
            yield str(python)
        finally:
            if keep is None:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False, capture_output=True)


async def b3(uri: str, db: str, size: int) -> tuple[int, float]:
    """The B3 loop over the seeded collection: (documents migrated, wall seconds)."""
    client: AsyncMongoClient[Any] = AsyncMongoClient(uri, **background.CLIENT_OPTIONS)
    try:
        await client.admin.command("ping")
        started = time.perf_counter()
        migrated, _ = await background._keyset(client[db], size, guarded=True)
        return migrated, time.perf_counter() - started
    finally:
        await client.close()


def measure(name: str, uri: str, pid: int, size: int, round_: int = 1) -> Measure:
    db = f"mongoshift_speed_{uuid.uuid4().hex[:8]}"
    client: MongoClient[Any] = MongoClient(uri, **background.CLIENT_OPTIONS)
    try:
        seed_s = background.seed(client, db, size)
        load_before = os.getloadavg()[0]
        cpu_before = process_cpu_s(pid)
        migrated, wall = asyncio.run(b3(uri, db, size))
        cpu = process_cpu_s(pid) - cpu_before
        load_after = os.getloadavg()[0]
        done, left = background.verify(client, db, size)
        if done != size or left or migrated != size:
            raise RuntimeError(f"{name} at {size}: {done}/{size} at version 2, {left} not in the new shape")
        client.drop_database(db)
    finally:
        client.close()
    result = Measure(name, size, seed_s, wall, cpu, migrated, load_before, load_after, round_)
    log(f"{name:>8} {size:>7,}: {result.docs_per_s:7,.0f} docs/s, server CPU {result.cpu_us_per_doc:8,.0f} µs/doc "
        f"(seeded in {seed_s:.0f} s; load {load_before:.1f} → {load_after:.1f})")
    return result


def render(rows: list[Measure], baseline: str) -> tuple[str, bool]:
    out = [
        f"B3 loop on the embedded server: baseline {baseline[:12]} against this checkout; batch {background.BATCH_SIZE}, "
        f"~1 KB documents; {os.cpu_count()} CPUs",
        "",
        "| round | docs | server | wall s | docs/s | server CPU s | CPU µs / doc | load avg (start → end) |",
        "|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        out.append(f"| {r.round} | {r.size:,} | {r.server} | {r.wall_s:.1f} | {r.docs_per_s:,.0f} | {r.server_cpu_s:.1f} | "
                   f"{r.cpu_us_per_doc:,.0f} | {r.load_before:.1f} → {r.load_after:.1f} |")
    out.append("")
    rounds = max((r.round for r in rows), default=1)
    of = f" (medians of {rounds} rounds)" if rounds > 1 else ""

    def median(server: str, size: int, figure: str) -> float | None:
        found = [getattr(r, figure) for r in rows if r.server == server and r.size == size]
        return statistics.median(found) if found else None

    ok = True
    sizes = sorted({r.size for r in rows})
    for size in sizes:
        old, new = median("baseline", size, "cpu_us_per_doc"), median("current", size, "cpu_us_per_doc")
        if old and new:
            ratio = old / new
            met = ratio >= TARGET_CPU_RATIO
            ok &= met
            speed = (median("current", size, "docs_per_s") or 0.0) / (median("baseline", size, "docs_per_s") or 1.0)
            out.append(f"* {size:,}: server CPU per document, baseline ÷ current = **{ratio:.1f}×**{of} "
                       f"(target ≥ {TARGET_CPU_RATIO:.0f}×: {'meets' if met else 'misses'}); docs/s {speed:.1f}×")
    if len(sizes) > 1 and median("current", sizes[0], "docs_per_s"):
        small, large = sizes[0], sizes[-1]
        flat = (median("current", large, "docs_per_s") or 0.0) / (median("current", small, "docs_per_s") or 1.0)
        growth = (median("current", large, "cpu_us_per_doc") or 0.0) / (median("current", small, "cpu_us_per_doc") or 1.0)
        each = paired_ratios(rows, small, large)
        if len(each) > 1:
            # Each round measures both sizes within a minute or two, alternating which first: a drift of the host's
            # speed over the run (up to 40 % within minutes here) moves the medians of the sizes apart, much less the
            # rounds' own ratios. So the verdict is the median of those ratios, as bench/background.py judges its rows.
            judged = statistics.median(each)
            met = judged >= TARGET_FLAT
            out.append(f"* current docs/s, {large:,} ÷ {small:,} documents, round by round: {', '.join(f'{x:.2f}' for x in each)}; "
                       f"their median **{judged:.2f}** (target ≥ {TARGET_FLAT}: {'meets' if met else 'misses'}); "
                       f"the ratio of the sizes' medians {flat:.2f}; CPU per document {growth:.2f}×")
        else:
            met = flat >= TARGET_FLAT
            out.append(f"* current docs/s, {large:,} ÷ {small:,} documents = **{flat:.2f}** (target ≥ {TARGET_FLAT}: "
                       f"{'meets' if met else 'misses'}); CPU per document {growth:.2f}×")
        ok &= met
    return "\n".join(out), ok


def paired_ratios(rows: list[Measure], small: int, large: int) -> list[float]:
    """The current server's docs/s at ``large`` ÷ at ``small``, one ratio per round that measured both."""
    speeds: dict[tuple[int, int], float] = {(r.round, r.size): r.docs_per_s for r in rows if r.server == "current"}
    rounds_ = sorted({n for n, _ in speeds})
    return [speeds[n, large] / speeds[n, small] for n in rounds_ if (n, large) in speeds and (n, small) in speeds and speeds[n, small]]


def rounds(sizes: list[int], repeat: int) -> list[tuple[int, int]]:
    """(round, size) in the order measured: every size once a round, every other round in reverse."""
    return [(n, size) for n in range(1, repeat + 1) for size in (sizes if n % 2 else sizes[::-1])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="20000,100000", help="comma-separated document counts (default 20000,100000)")
    parser.add_argument("--baseline", default=BASELINE, help=f"the commit to compare with (default {BASELINE[:12]})")
    parser.add_argument("--keep", type=Path, help="keep the baseline's worktree and venv in this folder (reused when present)")
    parser.add_argument("--only-current", action="store_true", help="measure this checkout alone (no baseline, no ratio)")
    parser.add_argument("--json", type=Path, help="also write every measurement to this file")
    parser.add_argument("--repeat", type=int, default=1, help="measure every size this many times, the sizes in turn; judge the medians (default 1)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", args.baseline], check=True, capture_output=True, text=True).stdout.strip()
    current_env = clean_env(PYTHONPATH=str(ROOT / "src"))
    rows: list[Measure] = []
    with nullcontext(None) if args.only_current else baseline_python(commit, args.keep) as old_python:
        for round_, size in rounds(sizes, args.repeat):
            if old_python is not None:
                with server(old_python, clean_env()) as (uri, pid):
                    rows.append(measure("baseline", uri, pid, size, round_))
            with server(sys.executable, current_env) as (uri, pid):
                rows.append(measure("current", uri, pid, size, round_))
            if args.json:
                args.json.write_text(json.dumps([{**asdict(r), "docs_per_s": r.docs_per_s, "cpu_us_per_doc": r.cpu_us_per_doc} for r in rows], indent=2) + "\n")
    table, ok = render(rows, commit)
    print(table)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
