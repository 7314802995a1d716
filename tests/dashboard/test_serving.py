"""The dashboard served by uvicorn (as ``mongoshift dashboard`` serves it): a shutdown does not wait on the open pages."""

from __future__ import annotations

import logging

import httpx
import pytest

from .conftest import NAME, TOKEN, WAIT_S, served

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


async def test_the_server_shuts_down_at_once_while_a_page_listens(registered, caplog) -> None:  # type: ignore[no-untyped-def]
    """An open page's event stream ends cleanly as the shutdown starts; uvicorn's default (no graceful timeout) would
    otherwise wait for it for ever, and with one it would cancel the stream (an error in the log) once it ran out."""
    caplog.set_level(logging.ERROR, logger="uvicorn")
    async with served(registered, config={"timeout_graceful_shutdown": None}) as dash:
        poller = await dash.app.state.dashboard.poller()
        async with httpx.AsyncClient(base_url=dash.url, timeout=WAIT_S) as web, web.stream("GET", f"/events?name={NAME}") as stream:
            chunks = stream.aiter_text()
            assert (await anext(chunks)).startswith("event: update\n")
            assert poller.listeners == 1
            await dash.stop()  # bounded: fails (saying where it waits) instead of waiting for ever
            rest = [chunk async for chunk in chunks]  # the response ended: its last chunk, no reset of the connection
        assert all(chunk.startswith("event: update\n") for chunk in rest)
    assert poller.listeners == 0
    assert not [r for r in caplog.records if r.name.startswith("uvicorn")], [r.getMessage() for r in caplog.records]


async def test_the_audits_who_is_the_connections_address_not_a_forwarded_header(registered, db) -> None:  # type: ignore[no-untyped-def]
    """uvicorn trusted ``X-Forwarded-For`` from 127.0.0.1, so any local client, the loopback dashboard's every one,
    wrote whatever address it liked into the history's "who" (``dashboard alice``); the connection's is recorded."""
    async with served(registered) as dash, httpx.AsyncClient(base_url=dash.url, timeout=WAIT_S) as web:
        answer = await web.post(
            f"/migrations/{NAME}/control",
            data={"action": "pause", "reason": "forwarded"},
            headers={"authorization": f"Bearer {TOKEN}", "x-forwarded-for": "alice", "x-forwarded-proto": "https"},
        )
        assert answer.status_code == 303 and answer.headers["location"].startswith("/")
    history = (await db["_mongoshift_background"].find_one({"_id": NAME}))["history"]
    assert [h["by"] for h in history if h["action"] == "pause"] == ["dashboard 127.0.0.1"]
