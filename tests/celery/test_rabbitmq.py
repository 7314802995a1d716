"""RabbitMQ as the broker (Redis keeps the results): the same line, through AMQP."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.celery

STEP = '''
def up(ctx):
    ctx.db.steps.insert_one({{"name": "{name}", "after": ctx.db.steps.count_documents({{}})}})
'''


def test_the_line_through_rabbitmq(rabbit_harness, project, sync_client) -> None:  # type: ignore[no-untyped-def]
    names = [f"2026010100000{i}_step_{i}.py" for i in range(1, 4)]
    for name in names:
        project.add(name, STEP.format(name=name))
    rabbit_harness.worker("-P", "solo")
    line = rabbit_harness.tasks.enqueue_up()
    assert rabbit_harness.tasks.enqueue_up().dropped == names
    results = line.wait(timeout=90)
    assert [r.outcome for r in results] == ["applied"] * 3, [r.error for r in results]
    assert [d["name"] for d in sync_client[project.db].steps.find().sort("after", 1)] == names
    records = {r["name"]: r for r in sync_client[project.db]["_mongoshift_migrations"].find()}
    assert [records[r.name]["run_id"] for r in results] == [r.run_id for r in results]
