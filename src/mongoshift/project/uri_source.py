"""Fetching the connection string at run time (``uri_command``, ``uri_factory``), so the
password lives in a secret manager instead of a file.

It runs when a command connects, never for commands that do not (``init``, ``create``).
Whatever goes wrong is a :class:`UriUnavailableError` (exit 41) that names the program or
the function, never what it printed or returned: that text is the secret.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

from ..errors import UriUnavailableError
from .redaction import cap, describe_error, redact
from .settings import Settings
from .user_code import call_detached, import_user_module, own_failure

SCHEMES = ("mongodb://", "mongodb+srv://")
#: ``uri_command`` runs in a process group of its own where there are process groups (see :func:`_from_command`).
_OWN_GROUP: dict[str, Any] = {"process_group": 0} if os.name == "posix" else {}


async def resolve_uri(settings: Settings) -> Settings:
    """``settings`` with ``uri`` filled from its ``uri_command`` or ``uri_factory`` (unchanged when it has a uri)."""
    if settings.uri or not (settings.uri_command or settings.uri_factory):
        return settings
    if settings.uri_command:
        where = f"uri_command {settings.uri_command[0]!r}"
        uri = await _from_command(settings.uri_command, settings.uri_timeout_seconds, where)
    else:
        assert settings.uri_factory is not None
        where = f"uri_factory {settings.uri_factory!r}"
        uri = await _from_factory(settings.uri_factory, settings.uri_timeout_seconds, where)
    return settings.model_copy(update={"uri": _checked(uri, where)})


def _checked(uri: object, where: str) -> str:
    """One mongodb:// line; the error says what is wrong with it, never what it is."""
    if not isinstance(uri, str):
        raise UriUnavailableError(f"{where} returned a {type(uri).__name__}, not a connection string")
    uri = uri.strip()
    if not uri:
        raise UriUnavailableError(f"{where} gave an empty connection string")
    if "\n" in uri:
        raise UriUnavailableError(f"{where} gave more than one line: it must print the connection string alone")
    if not uri.startswith(SCHEMES):
        raise UriUnavailableError(f"{where} gave something that does not start with mongodb:// or mongodb+srv://")
    return uri


async def _from_command(argv: list[str], timeout: float, where: str) -> str:  # noqa: ASYNC109 - it kills the program and says so
    """Run the program without a shell, stdin closed; its stdout is the URI.

    It runs in a process group of its own, killed whole when it runs out of time: a wrapper (a shell script
    around a secret manager's client) whose child still held its stdout kept the pipe open after the wrapper
    alone was killed, and the command waited for that child before it said exit 41."""
    try:
        process = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, **_OWN_GROUP
        )
    except OSError as exc:
        raise UriUnavailableError(f"{where} cannot be run: {exc.strerror or type(exc).__name__}") from None
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except BaseException as exc:  # out of time, or the command itself was cancelled: none of the group outlives it
        exited = process.returncode is not None  # the program ended; what it started still held its output
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if _OWN_GROUP:
                os.killpg(process.pid, signal.SIGKILL)
            else:
                process.kill()
        # The pipes are closed now, not when the process object is collected: after the loop had closed, that
        # printed "Exception ignored ... RuntimeError: Event loop is closed" with a traceback under the error.
        transport = getattr(process, "_transport", None)  # asyncio keeps no public handle on them
        if isinstance(transport, asyncio.SubprocessTransport):
            transport.close()
        if not isinstance(exc, TimeoutError):
            raise
        await process.wait()
        if exited:
            raise UriUnavailableError(
                f"{where} ended, but a process it started kept its output open past {timeout:g}s (uri_timeout_seconds): "
                "the output is read to its end, so start no background process that keeps it"
            ) from None
        raise UriUnavailableError(f"{where} did not finish within {timeout:g}s (uri_timeout_seconds)") from None
    if process.returncode != 0:
        said = err.decode("utf-8", "replace").strip().splitlines()
        tail = f": {cap(redact(said[-1]), 300)}" if said else ""
        raise UriUnavailableError(f"{where} exited with code {process.returncode}{tail}", exit_status=process.returncode)
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise UriUnavailableError(f"{where} printed something that is not UTF-8 text") from None


async def _from_factory(spec: str, timeout: float, where: str) -> Any:  # noqa: ASYNC109 - it says which setting bounds it
    """Import ``package.module`` and call ``function()``: an ``async def`` on the loop, a plain one in a thread."""
    module_name, _, attribute = spec.partition(":")
    try:
        function = getattr(import_user_module(module_name), attribute)
    except AttributeError:
        raise UriUnavailableError(f"{where}: {module_name} has no {attribute}") from None
    except BaseException as exc:  # importing user code may raise anything, even SystemExit or KeyboardInterrupt
        if not own_failure(exc):
            raise
        raise UriUnavailableError(f"{where} failed to import: {describe_error(exc)}") from None
    if not callable(function):
        raise UriUnavailableError(f"{where}: {attribute} is not a function")
    try:
        return await asyncio.wait_for(call_detached(function), timeout)  # a sync one left running never holds the command
    except TimeoutError:
        raise UriUnavailableError(f"{where} did not return within {timeout:g}s (uri_timeout_seconds)") from None
    except Exception as exc:
        raise UriUnavailableError(f"{where} failed: {describe_error(exc)}") from None
