"""Opening a client: bounded in time, the cause of a failure named, never showing a password.

A single host that refuses the connection, or whose TLS handshake fails (``tls=true`` against
a server without TLS, a certificate the CA file does not vouch for), fails at its first attempt:
nothing listens on that port, or the two ends disagree, and waiting out
``connect_timeout_seconds`` would not change it. Every other
failure (a host name that does not resolve may yet, a replica set may elect) waits the
timeout out, and the message says what the driver last saw of each host. A stop asked meanwhile
(Ctrl-C) ends the wait at once: nothing has been done yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from typing import Any
from urllib.parse import parse_qsl

from pymongo import AsyncMongoClient, MongoClient, monitoring
from pymongo.errors import ConfigurationError, InvalidURI, PyMongoError
from pymongo.uri_parser import parse_uri, parse_userinfo, split_options

from ..errors import AuthFailedError, ConfigInvalidError, ConnectionFailedError, RunAbortedError
from .redaction import redact
from .run import CancelSignal
from .server_errors import ConnectionCause, auth_failure, connection_cause, says_cause
from .settings import Settings

__all__ = ["auth_failure", "auth_summary", "client_options", "connect", "hosts_of", "redact", "sync_client"]

log = logging.getLogger("mongoshift")

#: Mechanisms whose users live in ``$external`` unless the URI names another auth source.
EXTERNAL_MECHANISMS = frozenset({"GSSAPI", "MONGODB-X509", "MONGODB-AWS", "MONGODB-OIDC", "PLAIN"})



def auth_summary(uri: str) -> tuple[str, str]:
    """The URI's auth mechanism and auth source, as the driver would use them (never the user)."""
    try:
        parsed = parse_uri(uri, validate=False, connect_timeout=1)
    except (InvalidURI, ConfigurationError, ValueError):
        return "default", "admin"
    options = {str(k).lower(): v for k, v in (parsed.get("options") or {}).items()}
    mechanism = str(options.get("authmechanism") or "default (SCRAM)")
    source = options.get("authsource")
    if not source:
        source = "$external" if mechanism.upper() in EXTERNAL_MECHANISMS else (parsed.get("database") or "admin")
    return mechanism, str(source)


def hosts_of(uri: str) -> str:
    try:
        nodes = parse_uri(uri, validate=False, connect_timeout=1).get("nodelist") or []
    except (InvalidURI, ConfigurationError, ValueError):
        return redact(uri)
    if not nodes:  # mongodb+srv: the seed list is the SRV name itself
        return redact(uri).split("://", 1)[-1].split("/", 1)[0]
    return ", ".join(f"{host}:{port}" for host, port in nodes)


#: The driver's ``connectTimeoutMS`` is also how long its monitor waits for a server's answer to a
#: heartbeat: a busy server that answers late would be taken for a lost one, its pool cleared and
#: the requests under way cancelled (``_OperationCancelled``), so it is never below this. How long
#: an unreachable server is waited for is ``serverSelectionTimeoutMS`` (:func:`selection_wait_seconds`).
MIN_CONNECT_TIMEOUT_MS = 60_000

#: How often a connection under way looks whether a stop was asked (as a tenant selection does).
STOP_POLL_SECONDS = 0.1


def names_app(uri: str) -> bool:
    """Whether the URI sets ``appName`` itself (URI options are case-insensitive); read from the
    query string alone, so that a ``mongodb+srv`` URI is not resolved to answer it."""
    return any(key.lower() == "appname" for key, _ in parse_qsl(uri.partition("?")[2], keep_blank_values=True))


def uri_selection_timeout_ms(uri: str) -> float | None:
    """The URI's own ``serverSelectionTimeoutMS`` (URI options are case-insensitive), when it names a
    number of milliseconds the driver takes (``1500``, ``1.5``); read from the query string alone (no
    ``mongodb+srv`` lookup). A value the driver refuses is :func:`check_uri_options`'s to refuse."""
    for key, value in parse_qsl(uri.partition("?")[2].partition("#")[0], keep_blank_values=True):
        if key.lower() == "serverselectiontimeoutms":
            try:
                number = float(value)
            except ValueError:
                return None
            return number if math.isfinite(number) and number >= 0 else None
    return None


def selection_wait_seconds(settings: Settings) -> float:
    """How long an unreachable server is waited for: the URI's ``serverSelectionTimeoutMS`` when it
    names one (the more specific setting, as an operator writes it into a URI for one environment),
    else ``connect_timeout_seconds``."""
    named = uri_selection_timeout_ms(settings.uri or "")
    return named / 1000 if named is not None else settings.connect_timeout_seconds


def client_options(settings: Settings) -> dict[str, Any]:
    timeout_ms = int(settings.connect_timeout_seconds * 1000)
    options: dict[str, Any] = {
        "connectTimeoutMS": max(timeout_ms, MIN_CONNECT_TIMEOUT_MS),
        "tz_aware": True,
    }
    # A keyword option overrides the URI's, so the wait is given as one only when the URI names none.
    if uri_selection_timeout_ms(settings.uri or "") is None:
        options["serverSelectionTimeoutMS"] = timeout_ms
    # A keyword option overrides the URI's: the URI's appName (what the operators filter the
    # server's logs and currentOp by, and what a fail point may target) wins over the default.
    if not names_app(settings.uri or ""):
        options["appname"] = "mongoshift"
    return options


#: The causes a lone host's first failed check fails the connection with, at once.
FINAL_CAUSES = ("refused", "tls")


class _RefusedWatch(monitoring.ServerHeartbeatListener):
    """Sees the driver's first check of a lone host fail with a refused connection or a failed TLS handshake."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.refused = asyncio.Event()
        self.error: PyMongoError | None = None

    def started(self, event: monitoring.ServerHeartbeatStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.ServerHeartbeatSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.ServerHeartbeatFailedEvent) -> None:
        reply = event.reply
        if self.error is None and isinstance(reply, PyMongoError) and connection_cause(reply) in FINAL_CAUSES:
            self.error = reply
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                self.loop.call_soon_threadsafe(self.refused.set)


async def _ping(client: AsyncMongoClient[Any], watch: _RefusedWatch | None) -> None:
    """The server's answer to a ping, or the refusal the watch saw first."""
    if watch is None:
        await client.admin.command("ping")
        return
    ping = asyncio.ensure_future(client.admin.command("ping"))
    refused = asyncio.ensure_future(watch.refused.wait())
    try:
        await asyncio.wait((ping, refused), return_when=asyncio.FIRST_COMPLETED)
    finally:
        refused.cancel()
    if ping.done():
        ping.result()
        return
    ping.cancel()
    with contextlib.suppress(asyncio.CancelledError, PyMongoError):
        await ping
    assert watch.error is not None
    raise watch.error


async def _unless_stopped(pinging: asyncio.Future[None], cancel: CancelSignal | None, hosts: str) -> None:
    """The ping's answer, or :class:`RunAbortedError` as soon as ``cancel`` is set while it is awaited: the
    server selection may wait out ``connect_timeout_seconds`` (an unreachable host), and Ctrl-C must not."""
    try:
        while not pinging.done():
            if cancel is not None and cancel.is_set():
                raise RunAbortedError(f"stopped ({cancel.reason or 'cancelled'}) while connecting to MongoDB at {hosts}; nothing was done")
            await asyncio.wait({pinging}, timeout=STOP_POLL_SECONDS)
        pinging.result()
    finally:
        if not pinging.done():
            pinging.cancel()
            with contextlib.suppress(asyncio.CancelledError, PyMongoError):
                await pinging


def _seeds(uri: str) -> int:
    """How many hosts the URI names (0 for a ``mongodb+srv`` name, which DNS turns into the hosts)."""
    try:
        return len(parse_uri(uri, validate=False, connect_timeout=1).get("nodelist") or [])
    except (InvalidURI, ConfigurationError, ValueError):
        return 0


def _unreachable(client: AsyncMongoClient[Any], exc: PyMongoError) -> tuple[ConnectionCause, str]:
    """The cause of a failed connection and its words: per host, from what the driver last saw of each."""
    seen = [(address, server.error) for address, server in client.topology_description.server_descriptions().items() if server.error]
    if not seen:
        cause = connection_cause(exc)
        return cause, says_cause(cause, str(exc))
    causes = [(f"{host}:{port}", connection_cause(error), str(error)) for (host, port), error in seen]
    if len({cause for _, cause, _ in causes}) == 1:
        return causes[0][1], says_cause(causes[0][1], causes[0][2])
    return "network", "; ".join(f"{host}: {says_cause(cause, text)}" for host, cause, text in causes)


#: Why the driver would refuse, or misread, a URI's user information; it never shows the user or password.
_ESCAPE_USERINFO = (
    "invalid uri: its user name or password holds a character that must be percent-encoded "
    "(@ : / ? % as %40 %3A %2F %3F %25; urllib.parse.quote_plus does it)"
)


def _check_userinfo(uri: str) -> None:
    """Refuse (exit 6) a user name or password the driver would refuse or cut in two, naming neither.

    The driver reads the user information up to the last ``@`` before the first ``?`` and ``/``:
    an ``@`` after them (in an option's name, or in what would be the database) is the rest of a
    password holding ``?`` or ``/``, and left to the driver, that rest was quoted as an option's name."""
    rest = uri.split("://", 1)[-1]
    before_query, _, query = rest.partition("?")
    authority, _, database = before_query.partition("/")
    if "@" in authority:
        try:
            parse_userinfo(authority.rpartition("@")[0])
        except (InvalidURI, ValueError):
            raise ConfigInvalidError(_ESCAPE_USERINFO) from None
    elif "@" in database or any("@" in key or "/" in key for key, _ in parse_qsl(query, keep_blank_values=True)):
        raise ConfigInvalidError(_ESCAPE_USERINFO)


def check_uri_options(uri: str) -> None:
    """Refuse (exit 6) a URI option the driver does not know, or a value it refuses: left to the
    driver, an unknown option (a typo) is a Python warning on stderr and then dropped, and a bad
    value of some options (``tls=maybe``) is ignored. Only the query is read (no DNS lookup for
    ``mongodb+srv``); each unknown option is named, never a value. The user information is checked
    first: a password holding a ``?`` or ``/`` that is not percent-encoded makes the driver read its
    end as an option's name or the database, which no message may quote."""
    _check_userinfo(uri)
    query = uri.split("?", 1)[1].split("#", 1)[0] if "?" in uri else ""
    if not query:
        return
    try:
        split_options(query, validate=True, warn=False)
    except (ConfigurationError, ValueError, InvalidURI, OSError) as exc:  # OSError: a tlsCAFile that cannot be read
        unknown = []
        for key, value in parse_qsl(query, keep_blank_values=True):
            try:
                split_options(f"{key}={value}", validate=True, warn=False)
            except ConfigurationError as one:
                if "Unknown option" in str(one):
                    unknown.append(key)
            except (ValueError, InvalidURI, OSError):
                pass
        if unknown:
            names = ", ".join(repr(redact(k, limit=64)) for k in dict.fromkeys(unknown))
            raise ConfigInvalidError(f"invalid uri: unknown option {names} (a typo? the driver would drop it)") from None
        said = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigInvalidError(f"invalid uri: {redact(said)}") from None


async def connect(settings: Settings, *, cancel: CancelSignal | None = None) -> AsyncMongoClient[Any]:
    """An async client whose server has answered a ping, or ConnectionFailedError naming the cause;
    RunAbortedError (exit 11) when ``cancel`` is set before the server answered."""
    uri, _ = settings.require_connection()
    check_uri_options(uri)
    watch = _RefusedWatch(asyncio.get_running_loop()) if _seeds(uri) == 1 else None
    options = client_options(settings)
    listeners = [*options.pop("event_listeners", ()), *([watch] if watch is not None else [])]
    try:
        client: AsyncMongoClient[Any] = AsyncMongoClient(uri, **options, event_listeners=listeners)
    except (InvalidURI, ConfigurationError, ValueError) as exc:
        raise ConfigInvalidError(f"invalid uri: {redact(str(exc))}") from None
    log.debug("connecting to MongoDB at %s (waiting up to %gs for a server)", hosts_of(uri), selection_wait_seconds(settings))
    try:
        await _unless_stopped(asyncio.ensure_future(_ping(client, watch)), cancel, hosts_of(uri))
    except RunAbortedError:
        await client.close()
        raise
    except PyMongoError as exc:
        cause, said = _unreachable(client, exc)  # read before the close forgets the servers
        await client.close()
        if isinstance(exc, ConfigurationError) and connection_cause(exc) != "dns":
            # a mongodb+srv host the driver refuses before any lookup (an IP address, a port, two hosts)
            raise ConfigInvalidError(f"invalid uri: {redact(str(exc))}") from None
        if auth_failure(exc, handshake=True):
            mechanism, source = auth_summary(uri)
            raise AuthFailedError(
                f"authentication failed at {hosts_of(uri)} (mechanism {mechanism}, auth source {source}): "
                "the server refused the user name or password of the URI",
                hosts=hosts_of(uri),
                mechanism=mechanism,
                auth_source=source,
            ) from None
        waited = "" if watch is not None and exc is watch.error else f" within {selection_wait_seconds(settings):g}s"
        raise ConnectionFailedError(
            f"cannot reach MongoDB at {hosts_of(uri)}{waited}: {redact(said)}",
            hosts=hosts_of(uri),
            cause=cause,
        ) from None
    return client


def sync_client(settings: Settings) -> MongoClient[Any]:
    """A sync client for migration functions written without ``async``; connects lazily."""
    uri, _ = settings.require_connection()
    check_uri_options(uri)
    return MongoClient(uri, **client_options(settings))
