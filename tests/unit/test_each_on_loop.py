"""A batch's async transforms on the loop: what is no ``Exception`` (``sys.exit``, ``KeyboardInterrupt``, ...)
fails its document, as a sync transform's does in the worker thread (test_each_in_thread.py). It ended the
runner: ``background run`` exited 1 printing the ``sys.exit`` message (a document's value), its lease held."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mongoshift.background.write.batch import Transformed, _each_on_loop, _settle
from mongoshift.project.redaction import describe_transform_error
from mongoshift.project.user_code import UserCodeExit


class Odd(BaseException):
    pass


RAISED: dict[str, BaseException] = {
    "sys.exit": SystemExit("bye F3"),
    "KeyboardInterrupt": KeyboardInterrupt(),
    "GeneratorExit": GeneratorExit(),
    "BaseException": Odd("odd"),
    "CancelledError": asyncio.CancelledError(),  # of its own making: no one cancelled the task
}


@pytest.mark.parametrize("kind", list(RAISED))
def test_an_async_transforms_base_exception_fails_its_document_only(kind: str) -> None:
    async def migrate(doc: dict[str, Any], ctx: Any) -> Any:
        if doc["i"] == 1:
            raise RAISED[kind]
        return {**doc, "done": True}

    async def batch() -> Transformed:
        return await _each_on_loop(migrate, [{"i": i} for i in range(3)], None)

    try:
        done = asyncio.run(batch())
    except BaseException as exc:  # what left the batch, whatever it is
        pytest.fail(f"{type(exc).__name__} left the batch")
    assert done.results == [{"i": 0, "done": True}, None, {"i": 2, "done": True}]
    assert list(done.failed) == [1] and isinstance(done.failed[1], UserCodeExit)
    assert "F3" not in describe_transform_error(done.failed[1])  # what is stored and shown


@pytest.mark.parametrize("kind", list(RAISED))
def test_an_awaitable_a_sync_transform_returned_fails_its_document_only(kind: str) -> None:
    async def later() -> Any:
        raise RAISED[kind]

    async def batch() -> Transformed:
        done = Transformed([{"i": 0}, later()])
        await _settle(done)
        return done

    try:
        done = asyncio.run(batch())
    except BaseException as exc:
        pytest.fail(f"{type(exc).__name__} left the batch")
    assert done.results == [{"i": 0}, None] and isinstance(done.failed[1], UserCodeExit)


def test_a_cancel_from_outside_still_stops_the_batch() -> None:
    """The task cancelled by a caller (a second Ctrl-C, a timeout) is no transform's failure: it goes on."""
    started = asyncio.Event()

    async def migrate(doc: dict[str, Any], ctx: Any) -> Any:
        started.set()
        await asyncio.sleep(60)

    async def batch() -> None:
        task = asyncio.create_task(_each_on_loop(migrate, [{"i": 0}], None))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(batch())
