"""Spans across tenant databases (issue 28): each tenant's run span carries that tenant's database."""

from __future__ import annotations

import uuid
from pathlib import Path

from pymongo import MongoClient

from mongoshift import api

from ..tenants.conftest import TenantProject
from .conftest import Telemetry


async def test_each_tenants_spans_carry_its_database(tmp_path: Path, mongo_uri: str, sync_client: MongoClient, telemetry: Telemetry) -> None:
    project = TenantProject(tmp_path, mongo_uri, f"ts{uuid.uuid4().hex[:8]}_", 3)
    project.add("0001_a.py", "async def up(ctx):\n    await ctx.db.items.insert_one({'a': 1})\n")
    try:
        report = await api.up_across(project.settings(), api.Tenants(all=True, parallel=2), observers=[telemetry.observer])
        assert report.ok
        runs = telemetry.spans("mongoshift.run")
        assert sorted(str(span.attributes["db.namespace"]) for span in runs) == project.tenants
        for migration in telemetry.spans("mongoshift.migration"):
            assert migration.parent is not None
            [run] = [r for r in runs if r.context.span_id == migration.parent.span_id]
            assert migration.attributes["db.namespace"] == run.attributes["db.namespace"]  # in its own tenant's run
    finally:
        for name in project.tenants:
            sync_client.drop_database(name)
