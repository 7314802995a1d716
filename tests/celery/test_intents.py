"""The intents a job system keeps in the lock collection (mongoshift.api.intents), on the server alone."""

from __future__ import annotations

import asyncio

import pytest

from mongoshift import api
from mongoshift.errors import ConfigInvalidError


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
