"""register(queue=...) routes every mongoshift task there through the app's task_routes (no broker needed)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

celery = pytest.importorskip("celery")

from celery import Celery  # noqa: E402
from celery.signals import before_task_publish  # noqa: E402

from mongoshift.celery import register  # noqa: E402


def _published_to(app: Celery, send: Any) -> str:
    seen: list[str] = []

    def note(sender: Any = None, routing_key: str = "", **rest: Any) -> None:
        seen.append(routing_key)

    before_task_publish.connect(note, weak=False)
    try:
        send()
    finally:
        before_task_publish.disconnect(note)
    assert len(seen) == 1
    return seen[0]


def test_a_plain_delay_goes_to_the_registrations_queue_and_other_routes_are_kept() -> None:
    app = Celery("routing-test", broker="memory://", backend="cache+memory://")
    app.conf.task_routes = {"billing.*": {"queue": "billing"}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no deprecated task attribute (Celery 6 ignores a task's own queue)
        tasks = register(app, settings="mongoshift.toml", queue="migrations")
        app.finalize(auto=True)

    @app.task(name="billing.charge")
    def charge() -> None: ...

    assert _published_to(app, lambda: tasks.verify.delay()) == "migrations"
    assert _published_to(app, lambda: tasks.audit.apply_async(queue="elsewhere")) == "elsewhere"  # an explicit queue wins
    assert _published_to(app, lambda: charge.delay()) == "billing"  # the application's own routes still apply
    assert _published_to(app, lambda: app.send_task("other.task")) == "celery"


def test_without_a_queue_the_apps_routes_decide() -> None:
    app = Celery("routing-test-2", broker="memory://", backend="cache+memory://")
    app.conf.task_routes = {"mongoshift.*": {"queue": "ops"}}
    tasks = register(app, settings="mongoshift.toml")
    assert _published_to(app, lambda: tasks.audit.delay()) == "ops"
