"""The engine's own thread: mongoeco's engine runs on an event loop there, the network on another.

mongoeco's memory engine computes in plain Python: a scan of 200,000 documents holds the event
loop it runs on for seconds, with no ``await`` in between. When that loop also served every
connection, a heartbeat waited for the scan, and pymongo's monitor (which gives a ``hello``
``connectTimeoutMS``, 20 s by default) took the server for lost, cleared its pool and cancelled
the operations in flight.

So the server runs on two loops (:mod:`mongoshift.embedded.server` wires them):

* the **network loop** (the caller's): the listener, every connection's reads and writes, and
  the heartbeats (``hello``, ``isMaster``, ``ping``), which read no engine state;
* the **engine loop** (:class:`EngineThread`, one thread): mongoeco's client and engine, the change
  history, the snapshot, and every other command, from decoding its request to encoding its reply
  (:mod:`mongoshift.embedded.patches.loops`).

The interpreter hands the GIL from the scanning thread to the waiting one every switch interval
(:data:`SWITCH_INTERVAL_S`), so the network loop answers a heartbeat within a few of them while a scan
runs. Commands of one connection stay in order: its handler reads the next request only once the
reply to the previous one is written.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)

#: The GIL switch interval the embedded server's process runs with (``sys.setswitchinterval``,
#: set by :func:`mongoshift.embedded.server.run`, not by ``serve()``, which runs inside someone
#: else's process). A heartbeat needs the GIL a few times (the socket read, the reply, the write:
#: each system call releases it, and the busy engine thread takes it back), and each time it waits
#: up to one interval. Measured during scans (bench/embedded_latency.py, 50,000 documents): hello
#: p50/p99 3.6/14.6 ms at 1 ms, 8.0/27.3 ms at Python's default 5 ms. The price is paid only
#: while both threads want to run: an idle network thread sleeps in ``epoll`` without asking for the GIL.
SWITCH_INTERVAL_S = 0.001


class EngineClosed(RuntimeError):
    """A command was handed to the engine thread after it stopped."""


class EngineThread:
    """One daemon thread running one event loop, on which the engine's coroutines run.

    :meth:`run` is awaited from another loop: it hands the coroutine over and waits for its result
    without blocking the calling loop; cancelling the caller cancels the coroutine on the engine
    loop. :meth:`drain` (on the engine loop) ends what is still running there, before shutdown.
    """

    def __init__(self, name: str = "mongoshift-engine", *, on_activity: Callable[[], None] | None = None) -> None:
        #: Told when a coroutine is handed over and when it ends (the collector's sign that the server is busy).
        self._on_activity = on_activity
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._running: set[asyncio.Task[Any]] = set()
        self._stopped = False

    def start(self) -> None:
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            try:
                self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            finally:
                self._loop.close()

    async def run[T](self, coroutine: Coroutine[Any, Any, T]) -> T:
        """``await coroutine`` on the engine loop; its result or exception comes back here."""
        if self._stopped:
            coroutine.close()
            raise EngineClosed("the embedded server's engine has stopped")
        told = self._on_activity
        if told is not None:
            told()
        future = asyncio.run_coroutine_threadsafe(self._tracked(coroutine), self._loop)
        try:
            return await asyncio.wrap_future(future)
        finally:
            if told is not None:
                told()

    async def _tracked[T](self, coroutine: Coroutine[Any, Any, T]) -> T:
        task = asyncio.current_task()
        assert task is not None
        self._running.add(task)
        try:
            return await coroutine
        finally:
            self._running.discard(task)

    async def drain(self) -> None:
        """On the engine loop: cancel every other coroutine handed over and wait until each ended.

        A command in the middle of a computation ends at its next ``await`` (as on a single loop):
        after this, nothing but the caller touches the engine."""
        current = asyncio.current_task()
        while others := [task for task in self._running if task is not current]:
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)
            self._running.difference_update(others)

    def stop(self) -> None:
        """Stop the loop and wait for the thread (from another thread, once nothing is handed over)."""
        if self._stopped:
            return
        self._stopped = True
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
        else:
            self._loop.close()
