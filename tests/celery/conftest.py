"""A real ``celery worker`` process against a real broker (Redis, and RabbitMQ for one test).

Each test gets its own queue and a project on its own database; the worker reaches the same
MongoDB server as the test (the embedded one, or ``MONGOSHIFT_TEST_URI``). Without a broker
listening, the tests skip and say which one.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .worker_app import make_app

REPO = Path(__file__).resolve().parents[2]
REDIS = ("127.0.0.1", 6379)
RABBITMQ = ("127.0.0.1", 5672)
#: One Redis database for the whole run of this suite; each test has its own queue in it.
REDIS_DB = 11


def listening(address: tuple[str, int]) -> bool:
    try:
        with socket.create_connection(address, timeout=1.0):
            return True
    except OSError:
        return False


def need(address: tuple[str, int], what: str) -> None:
    if not listening(address):
        pytest.skip(f"{what} is not listening on {address[0]}:{address[1]} (.ci/run starts it)")


class Worker:
    """One ``celery worker`` process; its log is kept for the failure message."""

    def __init__(self, env: dict[str, str], log: Path, pool: list[str]) -> None:
        self.log = log
        self.handle = log.open("ab")
        #: the worker's node name, which control messages (ping, revoke) are addressed to
        self.name = f"w{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.celery.worker_app", "worker", "-l", "INFO", "-Q", env["MS_CELERY_QUEUE"],
             "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", self.name, *pool],
            cwd=REPO, env=env, stdout=self.handle, stderr=subprocess.STDOUT,
        )

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def kill(self) -> None:
        """``kill -9`` (a ``-P solo`` worker is one process): no chance to ack or requeue anything."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # a warm shutdown: a task that ended is acknowledged
            try:
                self.process.wait(timeout=5)  # a solo worker on AMQP lingers ~10 s closing its connection
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.handle.close()


class Harness:
    """The producer side of a test: the app, mongoshift's tasks on it, and the workers it started."""

    def __init__(self, project: Any, tmp_path: Path, broker: str) -> None:
        queue = f"ms-{uuid.uuid4().hex[:10]}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOSHIFT_")}
        self.env.update(
            MS_CELERY_QUEUE=queue,
            MS_CELERY_BROKER=broker,
            MS_CELERY_BACKEND=f"redis://{REDIS[0]}:{REDIS[1]}/{REDIS_DB}",
            MS_CELERY_CONFIG=str(project.config),
            MS_CELERY_EVENTS=str(tmp_path / "events.log"),
            PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
            # the tests queue rollbacks, redos and single files: their producer and workers take every kind
            # unless a test starts a worker that says otherwise (Harness.worker(allow=...))
            MS_CELERY_ALLOW="up,down,redo,unordered",
        )
        self.app, self.tasks = make_app(self.env)
        self.tmp_path = tmp_path
        self.workers: list[Worker] = []

    def worker(self, *pool: str, allow: str | None = None) -> Worker:
        """A worker process; ``allow``: its ``register(app, allow=...)`` as ``MS_CELERY_ALLOW`` (None: the harness's)."""
        env = self.env if allow is None else {**self.env, "MS_CELERY_ALLOW": allow}
        started = Worker(env, self.tmp_path / f"worker-{len(self.workers)}.log", list(pool or ("-P", "solo")))
        self.workers.append(started)
        return started

    def events(self) -> list[tuple[str, str, str]]:
        """What the workers' observer saw: (kind, migration, run id) per event."""
        path = Path(self.env["MS_CELERY_EVENTS"])
        return [tuple(line.split(" ")) for line in path.read_text().splitlines()] if path.exists() else []  # type: ignore[misc]

    def logs(self) -> str:
        return "\n".join(w.tail() for w in self.workers)

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()
        queue = self.env["MS_CELERY_QUEUE"]
        with self.app.connection_for_write() as connection:  # the test's queue goes with it (RabbitMQ keeps it otherwise)
            connection.default_channel.queue_delete(queue)
        if self.env["MS_CELERY_BROKER"].startswith("redis://"):
            forget_redis_queue(queue)
        self.app.close()


def forget_redis_queue(queue: str) -> None:
    """Remove a test's queue, kombu's bindings of it, and the messages a killed worker left unacknowledged
    (kombu would put them back in the queue after the visibility timeout) from the suite's Redis database."""
    import json

    import redis

    with redis.Redis(host=REDIS[0], port=REDIS[1], db=REDIS_DB) as client:
        stale = list(client.scan_iter(match=f"*{queue}*"))
        if stale:
            client.delete(*stale)
        for tag, raw in client.hscan_iter("unacked"):
            if json.loads(raw)[-1] == queue:  # [message, exchange, routing key]
                client.hdel("unacked", tag)
                client.zrem("unacked_index", tag)


@pytest.fixture
def redis_harness(project, tmp_path) -> Iterator[Harness]:  # type: ignore[no-untyped-def]
    need(REDIS, "Redis")
    harness = Harness(project, tmp_path, f"redis://{REDIS[0]}:{REDIS[1]}/{REDIS_DB}")
    try:
        yield harness
    finally:
        harness.close()


@pytest.fixture
def rabbit_harness(project, tmp_path) -> Iterator[Harness]:  # type: ignore[no-untyped-def]
    need(REDIS, "Redis (the result backend)")
    need(RABBITMQ, "RabbitMQ")
    harness = Harness(project, tmp_path, f"amqp://guest:guest@{RABBITMQ[0]}:{RABBITMQ[1]}//")
    try:
        yield harness
    finally:
        harness.close()


def until(check, timeout: float, what: str, harness: Harness) -> None:  # type: ignore[no-untyped-def]
    """Poll ``check()`` until true; fail with the workers' logs after ``timeout`` (a bound, not a timing)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout:g}s\n{harness.logs()}")
        time.sleep(0.1)
