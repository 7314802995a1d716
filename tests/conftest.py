"""Shared fixtures: one embedded server per pytest process, a fresh database per test.

With ``MONGOSHIFT_TEST_URI`` set, the same tests run against that server instead
(a real replica set); tests that need what the embedded server lacks are marked
``real_mongodb`` and skipped without it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from pymongo import AsyncMongoClient, MongoClient

from mongoshift.embedded.process import embedded_server

from .node_tools import node_packages  # noqa: F401  (a session fixture: npm packages installed once)

# mongoeco serves every connection from one event loop: a long command stalls the
# monitor's hello, so tests use generous timeouts (docs/embedded.md, defect 7).
TEST_CLIENT_OPTIONS: dict[str, int] = {
    "connectTimeoutMS": 120_000,
    "socketTimeoutMS": 300_000,
    "heartbeatFrequencyMS": 60_000,
    "serverSelectionTimeoutMS": 30_000,
}

REAL_URI = os.environ.get("MONGOSHIFT_TEST_URI")

# Property tests must not depend on the machine's load: no per-example deadline, no health
# check that times data generation, and the same examples on every run (a failure reproduces
# as it was seen). ``HYPOTHESIS_PROFILE=explore`` draws fresh examples, with the same timing rules.
settings.register_profile(
    "mongoshift",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
    print_blob=True,
)
settings.register_profile("explore", settings.get_profile("mongoshift"), derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "mongoshift"))


@asynccontextmanager
async def fail_command(client: AsyncMongoClient, mode: Any, **data: Any) -> AsyncIterator[None]:
    """The server's ``failCommand`` fail point, switched off again on exit (also on a real
    mongod started with ``--setParameter enableTestCommands=1``)."""
    await client.admin.command({"configureFailPoint": "failCommand", "mode": mode, "data": data})
    try:
        yield
    finally:
        await client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})


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
    with embedded_server() as uri:
        yield uri


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


class Project:
    """A throwaway mongoshift project pointing at the test database."""

    def __init__(self, root: "os.PathLike[str] | str", uri: str, db: str) -> None:
        from pathlib import Path

        self.root = Path(root)
        self.uri = uri
        self.db = db
        self.migrations = self.root / "migrations"
        self.migrations.mkdir(parents=True, exist_ok=True)
        self.config = self.root / "mongoshift.toml"
        self.write_config()

    def write_config(self, **extra: object) -> None:
        import json

        lines = ["[mongoshift]", f"uri = {json.dumps(self.uri)}", f"db = {json.dumps(self.db)}", 'migrations_dir = "migrations"']
        for key, value in extra.items():
            lines.append(f"{key} = {json.dumps(value)}")
        self.config.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def add(self, name: str, source: str) -> "os.PathLike[str]":
        import textwrap

        path = self.migrations / name
        path.write_text(textwrap.dedent(source), encoding="utf-8")
        return path

    def settings(self, **flags: object):  # type: ignore[no-untyped-def]
        from mongoshift.project.settings import load_settings

        return load_settings(flags, config_path=self.config, environ={})


@pytest.fixture
def project(tmp_path, mongo_uri: str, db_name: str, sync_client: MongoClient) -> Iterator[Project]:  # type: ignore[no-untyped-def]
    yield Project(tmp_path, mongo_uri, db_name)
    sync_client.drop_database(db_name)
