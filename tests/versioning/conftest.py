"""A three-shape ``people`` collection shared by the versioning tests.

v1: ``{"name": "Ada Lovelace"}`` → v2: ``first`` / ``last`` → v3: adds ``status``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import MongoClient

from mongoshift.versioning import define_shapes


def split_name(doc: dict[str, Any]) -> dict[str, Any]:
    first, _, last = doc.pop("name", "").partition(" ")
    doc["first"], doc["last"] = first, last
    return doc


def add_status(doc: dict[str, Any]) -> dict[str, Any]:
    doc.setdefault("status", "active")
    return doc


PEOPLE = define_shapes(3, {1: split_name, 2: add_status})


@pytest.fixture
def sync_db(sync_client: MongoClient, db_name: str) -> Iterator[Any]:
    yield sync_client[db_name]
    sync_client.drop_database(db_name)
