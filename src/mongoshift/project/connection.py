"""Opening a client: bounded in time, refused credentials told apart, never showing a password."""

from __future__ import annotations

from typing import Any

from pymongo import AsyncMongoClient, MongoClient
from pymongo.errors import ConfigurationError, InvalidURI, PyMongoError
from pymongo.uri_parser import parse_uri

from ..errors import AuthFailedError, ConfigInvalidError, ConnectionFailedError
from .redaction import redact
from .server_errors import auth_failure
from .settings import Settings

__all__ = ["auth_failure", "auth_summary", "client_options", "connect", "hosts_of", "redact", "sync_client"]

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


def client_options(settings: Settings) -> dict[str, Any]:
    timeout_ms = int(settings.connect_timeout_seconds * 1000)
    return {
        "serverSelectionTimeoutMS": timeout_ms,
        "connectTimeoutMS": timeout_ms,
        "appname": "mongoshift",
        "tz_aware": True,
    }


async def connect(settings: Settings) -> AsyncMongoClient[Any]:
    """An async client whose server has answered a ping, or ConnectionFailedError."""
    uri, _ = settings.require_connection()
    try:
        client: AsyncMongoClient[Any] = AsyncMongoClient(uri, **client_options(settings))
    except (InvalidURI, ConfigurationError, ValueError) as exc:
        raise ConfigInvalidError(f"invalid uri: {redact(str(exc))}") from None
    try:
        await client.admin.command("ping")
    except PyMongoError as exc:
        await client.close()
        if auth_failure(exc, handshake=True):
            mechanism, source = auth_summary(uri)
            raise AuthFailedError(
                f"authentication failed at {hosts_of(uri)} (mechanism {mechanism}, auth source {source}): "
                "the server refused the user name or password of the URI",
                hosts=hosts_of(uri),
                mechanism=mechanism,
                auth_source=source,
            ) from None
        raise ConnectionFailedError(
            f"cannot reach MongoDB at {hosts_of(uri)} within {settings.connect_timeout_seconds:g}s: "
            f"{redact(type(exc).__name__)}",
            hosts=hosts_of(uri),
        ) from None
    return client


def sync_client(settings: Settings) -> MongoClient[Any]:
    """A sync client for migration functions written without ``async``; connects lazily."""
    uri, _ = settings.require_connection()
    return MongoClient(uri, **client_options(settings))
