"""How mongoshift calls the project's own functions (migrations, hooks, transforms).

One policy for every user function: an ``async def`` runs on the event loop;
a plain ``def`` runs in a worker thread, so a blocking call inside it never
stalls the loop that renews leases and locks. ``sys.exit`` or
``KeyboardInterrupt`` raised by user code is a failure of that code, never a
way to end mongoshift with an exit code of the user's choosing. A module named in the
settings (a ``uri_factory``, a tenants ``provider``) and a project file run from its source (a
migration, the hooks module) import with the current folder first on
``sys.path``, as ``python -m mongoshift`` run there would: the ``mongoshift`` command's path
starts with its own script folder, so ``saas.tenants`` beside ``mongoshift.toml`` would
otherwise need ``PYTHONPATH``.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import importlib
import importlib.util
import inspect
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any


class UserCodeExit(Exception):
    """User code (a migration or a hook) raised ``SystemExit``, ``KeyboardInterrupt`` or another
    exception that is no ``Exception`` (``BaseException``, ``GeneratorExit``, a ``CancelledError``
    of its own making).

    Such code does not decide how mongoshift ends: ``sys.exit(0)`` after half
    the writes must not look like success, nor ``sys.exit(3)`` like a held
    lock. It is turned into an ordinary failure of that code; a real Ctrl-C
    never arrives this way, the CLI's signal handler sets ``ctx.cancelled``.
    """

    @classmethod
    def of(cls, exc: BaseException) -> UserCodeExit:
        if isinstance(exc, SystemExit):
            return cls(f"sys.exit({exc.code!r}) was called; raise an exception to report a failure")  # a hook, a provider, a transform too
        return cls(f"{type(exc).__name__} was raised")


def guard_exit(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with ``SystemExit``, ``KeyboardInterrupt`` and the like turned into :class:`UserCodeExit` (sync or async)."""
    if is_async(fn):

        @functools.wraps(fn)  # named as the user's function (what a profile or a traceback shows)
        async def guarded_async(*args: Any) -> Any:
            try:
                return await _settled(await fn(*args))
            except Exception:
                raise
            except BaseException as exc:
                raise failure_of(exc) from None

        return guarded_async

    @functools.wraps(fn)
    def guarded(*args: Any) -> Any:
        try:
            return fn(*args)
        except Exception:
            raise
        except BaseException as exc:
            raise failure_of(exc) from None

    return guarded


def is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004 - an object whose __call__ is async


async def call(fn: Callable[..., Any], *args: Any) -> Any:
    """Await an async function; run a sync one in a thread. ``sys.exit`` inside either is a failure."""
    try:
        if is_async(fn):
            return await _settled(await fn(*args))
        # Converted in the thread already: a GeneratorExit that reached the awaiting coroutine would close it.
        return await _settled(await asyncio.to_thread(guard_exit(fn), *args))  # a sync function may return a coroutine
    except Exception:
        raise
    except BaseException as exc:
        raise failure_of(exc) from None


async def call_detached(fn: Callable[..., Any], *args: Any) -> Any:
    """:func:`call` for code a caller may stop waiting for (a migration's ``timeout_seconds``,
    ``uri_timeout_seconds``, Ctrl-C while a tenants provider reads a slow server): a plain ``def`` runs in a
    thread of its own that the process does not wait for as it ends (see :func:`detached_thread`)."""
    if is_async(fn):
        return await call(fn, *args)
    try:
        return await _settled(await detached_thread(guard_exit(fn), *args))
    except Exception:
        raise
    except BaseException as exc:
        raise failure_of(exc) from None


async def detached_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """``asyncio.to_thread(fn, *args)`` in a daemon thread of its own, which the process does not wait for.

    A time limit cannot stop a plain ``def``: its caller stops waiting and says so. In the loop's default
    pool, such a thread still held the command: ``asyncio.run`` and then the interpreter's exit join that
    pool's threads, so the command ended only when the code returned, forever for a hung call, although its
    error was said. Left in a daemon thread, it ends with the process instead. What it returns or raises
    after its caller stopped waiting (or after the loop closed) is dropped."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()  # as asyncio.to_thread: the caller's context variables

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():  # the caller stopped waiting (a timeout, a cancel)
            return
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)

    def run() -> None:
        result: Any = None
        error: BaseException | None = None
        try:
            result = context.run(fn, *args)
        except BaseException as exc:  # handed to the awaiting coroutine, which decides
            error = exc
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the loop is closed: nobody waits for it any more
            pass

    threading.Thread(target=run, name=f"mongoshift-{getattr(fn, '__name__', 'code')}", daemon=True).start()
    return await future


def failure_of(exc: BaseException) -> BaseException:
    """What user code's ``BaseException`` becomes: a :class:`UserCodeExit`, except the cancellation of
    the running task from outside (a timeout, a second Ctrl-C), which goes on as it is."""
    return UserCodeExit.of(exc) if own_failure(exc) else exc


def own_failure(exc: BaseException) -> bool:
    """Whether ``exc``, caught around the project's code (calling it, or importing it), is that code's own
    failure: anything it raised, ``SystemExit``, ``KeyboardInterrupt``, a ``BaseException`` of its own or a
    ``CancelledError`` it made itself; not the cancellation of the running task from outside (a timeout, a
    second Ctrl-C), which must go on. Each place that imports the project's code turns an own failure into
    its own error (exit 20, 12, 41, 46): one that let a ``BaseException`` through ended mongoshift with a
    traceback and exit 1, or as if Ctrl-C had been pressed."""
    if isinstance(exc, asyncio.CancelledError):
        try:
            task = asyncio.current_task()
        except RuntimeError:  # a thread without a loop: sync code raised it itself
            task = None
        if task is not None and task.cancelling():
            return False
    return True


async def _settled(result: Any) -> Any:
    """``result``, awaited when it is awaitable: ``return ctx.db.users.update_many(...)`` without
    ``await`` hands back the write not yet done, and its step must not be recorded before it ran."""
    return await result if inspect.isawaitable(result) else result


@contextmanager
def _current_folder_first() -> Iterator[None]:
    """The current folder first on ``sys.path`` while the project's code imports (see the module's docstring)."""
    here = str(Path.cwd())
    added = here not in sys.path
    if added:
        sys.path.insert(0, here)
    try:
        yield
    finally:
        if added and here in sys.path:
            sys.path.remove(here)


def import_user_module(name: str) -> ModuleType:
    """``importlib.import_module(name)`` with the current folder first on ``sys.path`` while it imports."""
    with _current_folder_first():
        return importlib.import_module(name)


def source_module(module_name: str, path: Path) -> ModuleType:
    """An empty module for the project's file ``path`` (its ``__file__`` and ``__spec__`` set), for
    :func:`run_source`; kept by the caller, so that what the file defined before failing is there."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None:
        raise ImportError(f"{path.name} cannot be imported as a Python module")
    return importlib.util.module_from_spec(spec)


def run_source(module: ModuleType, path: Path) -> None:
    """Run the project's file ``path`` in ``module`` from its source as it is now.

    Python's import machinery would read and write a bytecode cache beside the file, and trusts a
    cached file whose recorded modification time (in whole seconds) and size match: a migration
    edited twice within a second to the same size (a rolling deploy, a test) would run its old code
    under its new checksum. The cache would also leave ``__pycache__`` folders among the migrations
    (where a squash's archive must move whole). So the source is compiled every time; whatever the
    file raises reaches the caller, which names the file.
    """
    code = compile(importlib.util.decode_source(path.read_bytes()), str(path), "exec", dont_inherit=True)
    with _current_folder_first():  # its imports of the project's code (myapp.models) as python -m mongoshift finds them
        exec(code, module.__dict__)
