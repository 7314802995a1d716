"""The intents a job system keeps in the lock collection (mongoshift.api.intents), on the server alone."""

from __future__ import annotations

import asyncio

import pytest
from celery import Celery

from mongoshift import api
from mongoshift.celery import register
from mongoshift.errors import ConfigInvalidError, ExitCode, NotAppliedError

from ..background.conftest import background_file


async def test_a_live_intent_drops_a_duplicate_and_a_failed_one_is_replaced(project, client) -> None:  # type: ignore[no-untyped-def]
    settings = project.settings()
    first = [api.Claim("up:a.py", "task-1", 60, {"group": "g1"}), api.Claim("up:b.py", "task-2", 60)]
    assert await api.claim_intents(settings, first, client=client) == [True, True]
    assert await api.claim_intents(settings, [api.Claim("up:a.py", "task-3", 60)], client=client) == [False]  # queued: a duplicate
    assert await api.settle_intent(settings, "up:a.py", "task-1", "running", ttl_seconds=60, client=client)
    assert not await api.settle_intent(settings, "up:a.py", "task-3", "failed", ttl_seconds=60, client=client)  # not its owner
    assert await api.claim_intents(settings, [api.Claim("up:a.py", "task-3", 60)], client=client) == [False]  # running
    assert await api.settle_intent(settings, "up:a.py", "task-1", "failed", ttl_seconds=60, data={"kind": "execution_failed"}, client=client)
    seen = await api.read_intents(settings, ["up:a.py", "up:b.py", "up:c.py"], client=client)
    assert (seen["up:a.py"].state, seen["up:a.py"].live, seen["up:a.py"].data) == ("failed", False, {"kind": "execution_failed"})
    assert (seen["up:b.py"].state, seen["up:b.py"].live, seen["up:b.py"].owner) == ("queued", True, "task-2")
    assert "up:c.py" not in seen
    assert await api.claim_intents(settings, [api.Claim("up:a.py", "task-4", 60)], client=client) == [True]  # a new attempt
    assert await api.settle_intent(settings, "up:b.py", "task-2", None, ttl_seconds=60, client=client)  # done: removed
    assert "up:b.py" not in await api.read_intents(settings, ["up:b.py"], client=client)


async def test_a_lapsed_intent_frees_its_key(project, client) -> None:  # type: ignore[no-untyped-def]
    settings = project.settings()
    assert await api.claim_intents(settings, [api.Claim("background:x.py", "chain-1", 0.2)], client=client) == [True]
    await asyncio.sleep(0.5)  # the task holding it was lost with its message
    assert not (await api.read_intents(settings, ["background:x.py"], client=client))["background:x.py"].live
    assert await api.claim_intents(settings, [api.Claim("background:x.py", "chain-2", 60)], client=client) == [True]
    with pytest.raises(ConfigInvalidError, match="ttl_seconds"):
        await api.claim_intents(settings, [api.Claim("up:a.py", "t", 0)], client=client)


def test_a_chain_for_a_migration_up_never_registered_is_refused_before_anything_is_queued(project, sync_client) -> None:  # type: ignore[no-untyped-def]
    """Before, start_background said started=True, queued a coordinator and held the name's intent for
    a chain that could only end at its first step."""
    project.add("20260101000001_names.py", background_file())
    tasks = register(Celery("unregistered", broker="memory://", set_as_current=False), settings=project.settings())
    with pytest.raises(NotAppliedError, match="not a registered background migration") as refused:
        tasks.start_background("20260101000001_names")
    assert refused.value.exit_code == ExitCode.NOT_APPLIED
    assert sync_client[project.db]["_mongoshift_locks"].count_documents({}) == 0
