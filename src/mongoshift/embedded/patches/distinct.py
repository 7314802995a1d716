"""``distinct`` without comparing each value with every value kept (bw).

mongoeco 4.11 keeps a ``distinct`` command's answer in a list and compares each candidate with every
value already in it (``QueryEngine._values_equal``): quadratic in the distinct values. Over 2,000
values the command took about a minute, over 20,000 it ran for more than half an hour; it holds the
engine's loop the whole time, so every other command of that database waited behind it, and it went
on after its client had gone.

This fix keeps mongoeco's scan, candidates, order and equality, and only looks the candidate up
first: values of the types whose equality is plain (numbers, Decimal128 included, strings, booleans,
null, ObjectIds, dates, binaries) go into buckets by a key that two equal values always share, and a
candidate is compared, with mongoeco's own equality, only with the values of its bucket and with the
kept values that have no key (documents, arrays, every other type). A key may put unequal values
together (the comparison then tells them apart: mongoeco keeps ``6`` and ``Decimal128("6")`` apart,
and binaries of one content but two subtypes); it never separates equal ones: numbers are keyed by
their exact value (``1``, ``1.0``, ``Int64(1)`` and ``Decimal128("1.0")`` share one), a date by its UTC
instant to the millisecond. A command with a collation keeps mongoeco's loop as it is.
"""

from __future__ import annotations

import datetime
import math
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from bson import Binary, Decimal128, Int64, ObjectId

_NUMBERS = (int, float, Int64)


def equality_key(value: Any) -> Any:
    """A hashable key that every value equal to ``value`` shares, or None when there is none here."""
    kind = type(value)
    if kind is bool:
        return ("bool", value)
    if kind in _NUMBERS:
        if kind is float:
            if math.isnan(value):
                return ("nan",)
            if value.is_integer():
                return ("number", int(value))  # 2.0 ** 60 is the int 2 ** 60 exactly, as the comparison says
        return ("number", int(value) if kind is Int64 else value)
    if kind is Decimal128:
        exact = value.to_decimal()  # Python hashes a Decimal, an int and a float of one value alike
        return ("nan",) if exact.is_nan() else ("number", exact)
    if kind is str:
        return ("string", value)
    if kind is Binary or kind is bytes:
        return ("binary", bytes(value))  # every subtype in one bucket: the comparison tells them apart
    if kind is uuid.UUID:
        return ("binary", value.bytes)
    if value is None:
        return ("null",)
    if kind is ObjectId:
        return ("objectId", value.binary)
    if kind is datetime.datetime:
        instant = value if value.tzinfo is None else value.astimezone(datetime.UTC).replace(tzinfo=None)
        return ("date", instant.replace(microsecond=instant.microsecond // 1000 * 1000))
    return None


class Distinct:
    """The distinct values so far, fed a document's candidates at a time: each candidate looked up by
    :func:`equality_key` and compared only with its bucket and the kept values without a key."""

    def __init__(self, equal: Callable[[Any, Any], bool]) -> None:
        self.values: list[Any] = []
        self._equal = equal
        self._buckets: dict[Any, list[Any]] = {}
        self._loose: list[Any] = []

    def add(self, candidates: Iterable[Any]) -> None:
        equal, values, buckets, loose = self._equal, self.values, self._buckets, self._loose
        for candidate in candidates:
            key = equality_key(candidate)
            if key is None:
                if any(equal(existing, candidate) for existing in values):
                    continue
                loose.append(candidate)
            else:
                bucket = buckets.get(key)
                if bucket is not None and any(equal(existing, candidate) for existing in bucket):
                    continue
                if any(equal(existing, candidate) for existing in loose):
                    continue
                if bucket is None:
                    buckets[key] = [candidate]
                else:
                    bucket.append(candidate)
            values.append(candidate)


def patch_distinct() -> None:
    from mongoeco.api._async import _database_admin_read_commands as admin_reads
    from mongoeco.core.filtering import QueryEngine
    from mongoeco.types import DistinctCommandResult

    service = admin_reads.DatabaseAdminReadCommandService
    original = service.execute_distinct_command

    async def execute_distinct_command(self: Any, collection_name: str, key: str, operation: Any, *, session: Any = None) -> Any:
        # the module's name looked up at each call: (z) replaces it there after this fix is installed
        if admin_reads.normalize_collation(operation.collation) is not None:
            return await original(self, collection_name, key, operation, session=session)
        dialect = self._admin._mongodb_dialect

        def equal(left: Any, right: Any) -> bool:
            return bool(QueryEngine._values_equal(left, right, dialect=dialect, collation=None))

        collection = self._admin._database.get_collection(collection_name)
        seen = Distinct(equal)
        async for document in collection._build_cursor(operation, session=session):
            # the candidates of a document, as mongoeco's loop takes them
            values = QueryEngine.extract_values(document, key)
            if not values:
                found, value = QueryEngine._get_field_value(document, key)
                if not found:
                    values = [None]
                elif isinstance(value, list):
                    continue
                else:
                    values = [value]
            seen.add(values[1:] if isinstance(values[0], list) else values)
        return DistinctCommandResult(values=seen.values)

    execute_distinct_command.__wrapped__ = original  # type: ignore[attr-defined]  # the original, for the tests that compare both
    service.execute_distinct_command = execute_distinct_command
