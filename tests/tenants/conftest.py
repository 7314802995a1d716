"""A project whose tenants are a few fresh databases of the test server, dropped afterwards."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pymongo import MongoClient

from ..conftest import Project


class TenantProject(Project):
    """A throwaway project whose ``[tenants]`` names ``tenants`` (each a database of the test server)."""

    def __init__(self, root: Path, uri: str, prefix: str, count: int) -> None:
        self.prefix = prefix
        self.tenants = [f"{prefix}{i}" for i in range(count)]
        super().__init__(root, uri, db="")  # no [mongoshift] db: the tenants name the databases

    def __fspath__(self) -> str:  # the ``cli`` fixture runs a command in the project's folder
        return str(self.root)

    def write_config(self, **tenants: object) -> None:
        tenants = tenants or {"databases": self.tenants}
        lines = ["[mongoshift]", f"uri = {json.dumps(self.uri)}", 'migrations_dir = "migrations"', "[mongoshift.tenants]"]
        lines += [f"{key} = {json.dumps(value)}" for key, value in tenants.items()]
        self.config.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture
def tenant_project(tmp_path: Path, mongo_uri: str, sync_client: MongoClient) -> Iterator[TenantProject]:
    prefix = f"tn{uuid.uuid4().hex[:8]}_"
    project = TenantProject(tmp_path, mongo_uri, prefix, 4)
    yield project
    for name in sync_client.list_database_names():
        if name.startswith(prefix):
            sync_client.drop_database(name)
