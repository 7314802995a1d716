"""Shared fixtures: one embedded server per pytest process, a fresh database per test.

With ``MONGOSHIFT_TEST_URI`` set, the same tests run against that server instead
(a real replica set); tests that need what the embedded server lacks are marked
``real_mongodb`` and skipped without it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from pymongo import AsyncMongoClient, MongoClient

# mongoeco serves every connection from one event loop: a long command stalls the
# monitor's hello, so tests use generous timeouts (docs/embedded.md, defect 7).
TEST_CLIENT_OPTIONS: dict[str, int] = {
    "connectTimeoutMS": 120_000,
    "socketTimeoutMS": 300_000,
    "heartbeatFrequencyMS": 60_000,
    "serverSelectionTimeoutMS": 30_000,
}

REAL_URI = os.environ.get("MONGOSHIFT_TEST_URI")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if REAL_URI:
        return
    skip = pytest.mark.skip(reason="needs a real MongoDB replica set: set MONGOSHIFT_TEST_URI")
    for item in items:
        if "real_mongodb" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def mongo_uri() -> Iterator[str]:
    if REAL_URI:
        yield REAL_URI
        return
    proc = subprocess.Popen(
        [sys.executable, "-m", "mongoshift.embedded", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=None,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("mongodb://"):
        proc.kill()
        raise RuntimeError(f"embedded server did not start (first line: {line!r})")
    try:
        yield line
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture
def db_name() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def client(mongo_uri: str) -> AsyncIterator[AsyncMongoClient]:
    c: AsyncMongoClient = AsyncMongoClient(mongo_uri, **TEST_CLIENT_OPTIONS)
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
async def db(client: AsyncMongoClient, db_name: str):  # type: ignore[no-untyped-def]
    database = client[db_name]
    yield database
    await client.drop_database(db_name)


@pytest.fixture
def sync_client(mongo_uri: str) -> Iterator[MongoClient]:
    c: MongoClient = MongoClient(mongo_uri, **TEST_CLIENT_OPTIONS)
    try:
        yield c
    finally:
        c.close()
