"""``-p tests.cpu_report`` with ``MONGOSHIFT_CPU_REPORT=FILE``: each test's CPU seconds, appended to FILE.

The suite on two cores is bound by CPU, not by waiting, so its cost is counted in CPU: this
process's (``RUSAGE_SELF``), the child processes it waited for (``RUSAGE_CHILDREN``: CLI
processes, Celery workers) and the live ones (the embedded server, read from ``/proc``), before
and after each test, setup and teardown included. CPU time moves far less with the machine's
load than wall time, so the report ranks tests on a busy machine too. ``tools/cpu_report.py``
sums it by file.
"""

from __future__ import annotations

import json
import os
import resource
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

TICK = os.sysconf("SC_CLK_TCK")


def _live_children() -> float:
    """CPU seconds of this process's live child processes (and theirs), from ``/proc``."""
    parents = {os.getpid()}
    total = 0.0
    stats: list[tuple[int, int, float]] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats.append((int(entry.name), int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK))
    grew = True
    while grew:
        grew = False
        for pid, ppid, _ in stats:
            if ppid in parents and pid not in parents:
                parents.add(pid)
                grew = True
    for pid, _, cpu in stats:
        if pid in parents and pid != os.getpid():
            total += cpu
    return total


def _cpu() -> float:
    me, done = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + done.ru_utime + done.ru_stime + _live_children()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Generator[None]:
    target = os.environ.get("MONGOSHIFT_CPU_REPORT")
    if not target:
        yield
        return
    before = _cpu()
    yield
    line = json.dumps({"test": item.nodeid, "cpu": round(_cpu() - before, 3)})
    with open(f"{target}.{os.environ.get('PYTEST_XDIST_WORKER', 'main')}", "a", encoding="utf-8") as report:
        report.write(line + "\n")
