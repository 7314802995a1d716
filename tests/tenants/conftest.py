"""A project whose tenants are a few fresh databases of the test server, dropped afterwards."""

from __future__ import annotations

import json
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pymongo import MongoClient


class TenantProject:
    """A throwaway project whose ``[tenants]`` names ``tenants`` (each a database of the test server)."""

    def __init__(self, root: Path, uri: str, prefix: str, count: int) -> None:
        self.root = root
        self.uri = uri
        self.prefix = prefix
        self.tenants = [f"{prefix}{i}" for i in range(count)]
        self.migrations = root / "migrations"
        self.migrations.mkdir(parents=True, exist_ok=True)
        self.config = root / "mongoshift.toml"
        self.write_config(databases=self.tenants)

    def __fspath__(self) -> str:  # the ``cli`` fixture runs a command in the project's folder
        return str(self.root)

    def write_config(self, **tenants: object) -> None:
        lines = ["[mongoshift]", f"uri = {json.dumps(self.uri)}", 'migrations_dir = "migrations"', "[mongoshift.tenants]"]
        lines += [f"{key} = {json.dumps(value)}" for key, value in tenants.items()]
        self.config.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def add(self, name: str, source: str) -> Path:
        path = self.migrations / name
        path.write_text(textwrap.dedent(source), encoding="utf-8")
        return path

    def settings(self, **flags: object):  # type: ignore[no-untyped-def]
        from mongoshift.project.settings import load_settings

        return load_settings(flags, config_path=self.config, environ={})


@pytest.fixture
def tenant_project(tmp_path: Path, mongo_uri: str, sync_client: MongoClient) -> Iterator[TenantProject]:
    prefix = f"tn{uuid.uuid4().hex[:8]}_"
    project = TenantProject(tmp_path, mongo_uri, prefix, 4)
    yield project
    for name in sync_client.list_database_names():
        if name.startswith(prefix):
            sync_client.drop_database(name)
