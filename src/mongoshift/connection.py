"""Opening a client: bounded in time, and never showing a password."""

from __future__ import annotations

import re
from typing import Any

from pymongo import AsyncMongoClient, MongoClient
from pymongo.errors import ConfigurationError, InvalidURI, PyMongoError
from pymongo.uri_parser import parse_uri

from .config import Settings
from .errors import ConfigInvalidError, ConnectionFailedError

_CREDENTIALS = re.compile(r"(mongodb(?:\+srv)?://)[^@/]*@")


def redact(text: str) -> str:
    """Strip ``user:password@`` from any URI inside ``text``."""
    return _CREDENTIALS.sub(r"\1***@", text)


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
