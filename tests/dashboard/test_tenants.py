"""The overview's tenants view on a project whose databases are its tenants (``[tenants]``)."""

from __future__ import annotations

import re

import pytest
from pymongo import MongoClient

from mongoshift.dashboard import poller as polling

from ..tenants.conftest import TenantProject
from .conftest import make_app, reads_per_poll, tenants_at_each_state

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

async def test_the_overview_counts_tenants_at_each_state_and_names_the_ones_behind_or_failed(
    tenant_project: TenantProject, sync_client: MongoClient, http  # type: ignore[type-arg, no-untyped-def]
) -> None:
    up_to_date, failed, behind = await tenants_at_each_state(tenant_project, sync_client)
    web = http(make_app(tenant_project, None))  # the dashboard opens its own client: a project without a db of its own
    page = await web.get("/")
    assert page.status_code == 200, page.text
    assert "4 tenants" in page.text
    assert re.search(r'data-testid="tenants-up-to-date">up to date 2<', page.text)
    assert re.search(r'data-testid="tenants-behind">behind 1<', page.text)
    assert re.search(r'data-testid="tenants-failed">failed 1<', page.text)
    named = dict(re.findall(r'<tr data-tenant="([^"]+)"><td>[^<]+</td><td><span class="badge tenant-(\w+)">', page.text))
    assert named == {failed: "failed", behind: "behind"}
    assert not any(f'data-tenant="{name}"' in page.text for name in up_to_date)  # counted, not listed
    assert f'<td>{failed}</td><td><span class="badge tenant-failed">failed</span></td><td>0002_b.py failed</td>' in page.text
    assert f'<td>{behind}</td><td><span class="badge tenant-behind">behind</span></td><td>2 to go: 0001_a.py, 0002_b.py</td>' in page.text
    assert "Migration line" not in page.text  # the project has no database of its own: only its tenants


async def test_a_project_without_tenants_has_no_tenants_view(registered, counted_client, http) -> None:  # type: ignore[no-untyped-def]
    client, _ = counted_client
    page = await http(make_app(registered, client)).get("/")
    assert page.status_code == 200 and 'data-testid="tenants"' not in page.text and "Migration line" in page.text


async def test_the_tenants_are_read_by_the_shared_poll_whatever_the_open_pages(
    tenant_project: TenantProject, sync_client: MongoClient, counted_client, http  # type: ignore[type-arg, no-untyped-def]
) -> None:
    """Every tenant's status is read once per ``TENANTS_EVERY`` polls, by the one loop: twenty pages cost the reads of one."""
    await tenants_at_each_state(tenant_project, sync_client)
    client, reads = counted_client
    app = make_app(tenant_project, client)
    http(app)  # closes the app at the end
    one = await reads_per_poll(app, reads, "/events", 1, polls=polling.TENANTS_EVERY)
    twenty = await reads_per_poll(app, reads, "/events", 20, polls=polling.TENANTS_EVERY)
    assert one > 0  # a window of TENANTS_EVERY polls holds exactly one read of the tenants
    assert twenty <= one * 1.2, (one, twenty)
