"""A client for a runtime that makes several API calls in one unit of work (a job system's task).

Passing it as ``client=`` to each call connects once instead of once per call; the caller closes it.
"""

from __future__ import annotations

from typing import Any

from pymongo import AsyncMongoClient

from ..project.connection import connect
from ..project.settings import Settings
from ..project.uri_source import resolve_uri
from .options import checked_settings


async def open_client(settings: Settings) -> AsyncMongoClient[Any]:
    """A connected client for ``settings`` (``uri_command`` / ``uri_factory`` fetched now), or the
    connection error every command raises (exit 5, 35 or 41). Close it with ``await client.close()``."""
    return await connect(await resolve_uri(checked_settings(settings)))
