"""The Celery app of the tests: built from ``MS_CELERY_*`` variables, the same in the test and in the worker.

A worker process runs ``celery -A tests.celery.worker_app worker``; the test builds its producer
with :func:`make_app` from the same values, so both see the same task names and queue.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from celery import Celery

from mongoshift.celery import BackgroundOptions, LineOptions, MongoshiftTasks, register


def event_log(path: str):  # type: ignore[no-untyped-def]
    """An observer that appends ``kind migration run_id`` per event to ``path`` (the worker's events, for the test)."""

    def observe(event) -> None:  # type: ignore[no-untyped-def]
        with open(path, "a", encoding="utf-8") as out:
            out.write(f"{event.kind} {event.migration} {event.run_id}\n")

    return observe


def make_app(env: Mapping[str, str]) -> tuple[Celery, MongoshiftTasks]:
    queue = env["MS_CELERY_QUEUE"]
    app = Celery(f"mongoshift-test-{queue}", broker=env["MS_CELERY_BROKER"], backend=env["MS_CELERY_BACKEND"], set_as_current=False)
    app.conf.update(
        task_default_queue=queue,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        result_expires=600,
    )
    tasks = register(
        app,
        settings=env["MS_CELERY_CONFIG"],
        queue=queue,
        line=LineOptions(lock_wait_seconds=1.0, poll_seconds=0.2, line_wait_seconds=120.0, intent_ttl_seconds=300.0),
        background=BackgroundOptions(poll_seconds=0.3, chain_ttl_seconds=3.0),
        observers=[event_log(env["MS_CELERY_EVENTS"])],
        # MS_CELERY_ALLOW: the kinds of line task taken, comma-separated ("" none); unset: register's default
        **({"allow": {k for k in env["MS_CELERY_ALLOW"].split(",") if k}} if "MS_CELERY_ALLOW" in env else {}),
    )
    return app, tasks


if "MS_CELERY_QUEUE" in os.environ:
    app, tasks = make_app(os.environ)
