"""How the CLI runs a command's coroutine (``cli.app.run_async``)."""

from __future__ import annotations

import pytest

from mongoshift.cli.app import run_async
from mongoshift.project.run import CancelSignal


def test_a_commands_error_carries_no_event_loop_lookup_as_its_context() -> None:
    """Run outside any loop, a command's error is its own: a traceback (-v) began with 'RuntimeError: no running
    event loop ... During handling of the above exception' when the command ran inside that lookup's except."""

    async def boom(cancel: CancelSignal) -> None:
        raise KeyError("x")

    with pytest.raises(KeyError) as raised:
        run_async(boom)
    assert raised.value.__context__ is None
