"""Views listed as mongod lists them: ``type: "view"`` and read-only (bi)."""

from __future__ import annotations

import dataclasses
from typing import Any


# (bi) listCollections reported a view as {type: "collection", info: {readOnly: false}}:
# mongoeco's AsyncDatabaseAdminService._list_collection_snapshots builds every entry with
# the snapshot's defaults and only copies the options (where viewOn and pipeline are). A
# client that tells views from collections by ``type``, as drivers and mongoshift's own
# check of its record collections do, took a view for a collection. The fix marks each
# entry whose options name ``viewOn`` as mongod does: type "view", info.readOnly true.
def patch_view_listing() -> None:
    from mongoeco.api._async.database_admin import AsyncDatabaseAdminService

    original = AsyncDatabaseAdminService._list_collection_snapshots

    async def list_collection_snapshots(self: Any, *args: Any, **kwargs: Any) -> Any:
        snapshots = await original(self, *args, **kwargs)
        return [
            dataclasses.replace(snapshot, type="view", read_only=True) if "viewOn" in (snapshot.options or {}) else snapshot
            for snapshot in snapshots
        ]

    AsyncDatabaseAdminService._list_collection_snapshots = list_collection_snapshots
