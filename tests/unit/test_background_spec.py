"""The ``Background`` spec's own checks: strict numbers (a bool or a text is not one) and BSON-only values."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from mongoshift.schema.background import Background


def migrate(doc: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return doc


BASE: dict[str, Any] = {"collection": "people", "from_version": 1, "to_version": 2, "migrate": migrate}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("slice_ms", True),
        ("batch_size", "100"),
        ("pause_ms", 1.5),
        ("max_parallel", 2.0),
        ("from_version", False),
        ("max_document_errors", None),
        ("partitions", {"over_partition": True}),
        ("adaptive", {"min_batch_size": "5"}),
        ("transaction", {"max_retries": False}),
        ("max_replication_lag_ms", True),
        ("max_replication_lag_ms", 1.5),
        ("write_concern", {"w": True}),
        ("write_concern", {"w": 0}),
        ("write_concern", {"w": "majority", "wtimeout": "5"}),
        ("write_concern", {"w": 1, "j": 1}),
        ("pipeline", [{"$set": {"a": {1, 2}}}]),
        ("filter", {"a": {"$in": (object(),)}}),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_and_named(key: str, value: Any) -> None:
    data = {**BASE, key: value}
    if key == "pipeline":
        del data["migrate"]
    with pytest.raises(ValidationError) as refused:
        Background(**data)
    assert [err["loc"][0] for err in refused.value.errors()] == [key]


def test_the_right_types_are_taken() -> None:
    spec = Background(
        **BASE, slice_ms=1_000, max_replication_lag_ms=False, write_concern={"w": "majority", "j": True, "wtimeout": 1000},
        filter={"when": __import__("datetime").datetime(2024, 1, 1), "n": {"$in": (1, 2)}},
    )
    assert spec.slice_ms == 1_000 and spec.max_replication_lag_ms is False
    assert Background(**BASE, write_concern={"w": 2}, transaction=True).batch_size == 100


def test_value_and_rule_problems_come_together() -> None:
    with pytest.raises(ValidationError) as refused:
        Background(**{**BASE, "to_version": 1, "batch_size": 0, "revert_step": migrate})
    assert sorted(str(err["loc"][0]) for err in refused.value.errors()) == ["batch_size", "revert_step", "to_version"]
