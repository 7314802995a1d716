"""Change streams over the wire for the embedded server (mongoeco 4.11 serves none).

mongod answers ``aggregate`` with a leading ``$changeStream`` from its oplog; mongoeco
has an in-process change hub but no wire command for it, and its hub keeps events
only while someone watches. This module gives the server what a change stream needs:

* :class:`ChangeHistory`, the server's oplog-like history. It is the sink mongoeco's
  memory engine delivers committed changes to (its commit sequence: a transaction's
  writes arrive at commit, an aborted one's never), kept whether or not anyone
  watches, bounded to ``max_events`` (oldest dropped first). Each event gets a
  monotonic cluster time (BSON Timestamp) and a wall time from an injected clock.
* :func:`patch_wire`, a pinned wrapper of mongoeco's wire dispatch that serves
  ``aggregate`` with ``$changeStream`` (collection, database or cluster level),
  ``getMore`` (awaits new events up to ``maxTimeMS``) and ``killCursors`` for the
  cursors it opens, with mongod's reply shapes and error codes.

What it does not give (``updateDescription``, pre-images, ``invalidate``/``drop``
events, ``showExpandedEvents``...) is listed in docs/embedded.md.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime
import itertools
import logging
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from mongoeco._change_streams.hub import ChangeStreamHub
from mongoeco.core.bson_scalars import BsonInt64
from mongoeco.errors import OperationFailure
from mongoeco.types import Timestamp

log = logging.getLogger(__name__)

DEFAULT_MAX_EVENTS = 100_000
# mongod's default await time for a tailable-await getMore without maxTimeMS.
DEFAULT_AWAIT_MS = 1_000
# mongod's default first batch size.
DEFAULT_FIRST_BATCH = 101
# The wire cursor store numbers its cursors from 1; change-stream cursors live far above.
_CURSOR_ID_BASE = 1 << 48
_WHOLE_DATABASE = "$cmd.aggregate"  # the namespace mongod gives a database-level stream's cursor
_EVENT_TYPES = frozenset({"insert", "update", "replace", "delete"})
_FULL_DOCUMENT_MODES = frozenset({"default", "updateLookup", "whenAvailable", "required"})
_BEFORE_CHANGE_MODES = frozenset({"off", "whenAvailable", "required"})
_STAGE_OPTIONS = frozenset(
    {"fullDocument", "resumeAfter", "startAfter", "startAtOperationTime", "allChangesForCluster",
     "fullDocumentBeforeChange", "showExpandedEvents"}
)
# The stages a change stream's pipeline may hold after $changeStream, and mongod's other stage names.
_STREAM_STAGES = frozenset({"$match", "$project", "$addFields", "$set", "$unset", "$replaceRoot", "$replaceWith", "$redact"})
_KNOWN_STAGES = _STREAM_STAGES | frozenset(
    {"$sample", "$sort", "$skip", "$limit", "$unwind", "$group", "$bucket", "$bucketAuto", "$lookup", "$unionWith",
     "$facet", "$count", "$sortByCount", "$setWindowFields", "$documents", "$densify", "$fill", "$merge", "$out",
     "$geoNear", "$collStats", "$indexStats", "$currentOp", "$planCacheStats", "$listSessions", "$listLocalSessions",
     "$graphLookup", "$changeStream", "$search", "$searchMeta", "$vectorSearch", "$listSearchIndexes",
     "$changeStreamSplitLargeEvent", "$shardedDataDistribution", "$querySettings"}
)
_TOKEN_FORMAT = ">BIIQ"  # version, seconds, increment, position
_TOKEN_VERSION = 1

# mongod's codes and messages.
_HISTORY_LOST = (286, "ChangeStreamHistoryLost",
                 "Resume of change stream was not possible, as the resume point may no longer be in the oplog.")
_TOKEN_NOT_FOUND = (280, "ChangeStreamFatalError", "cannot resume stream; the resume token was not found.")
_TOKEN_MODIFIED = ("Encountered an event whose _id field, which contains the resume token, was modified by the "
                   "pipeline. Modifying the _id field of an event makes it impossible to resume the stream from that "
                   "point. Only transformations that retain the unmodified _id field are allowed.")


def _failure(code: int, code_name: str, message: str) -> OperationFailure:
    return OperationFailure(message, code=code, details={"codeName": code_name})


def _order(stamp: Timestamp) -> tuple[int, int]:
    return (stamp.time, stamp.inc)


def _bad_value(message: str) -> OperationFailure:
    return _failure(2, "BadValue", message)


@dataclasses.dataclass(frozen=True, slots=True)
class ChangeEvent:
    """One committed write, as the history keeps it.

    ``full_document``: an insert's or a replacement's document, an update's result (its
    post-image, from which, with ``before``, its update description is computed on read);
    an insert's, (bu), as the stored document it wrote (a :class:`_Inserted`), decoded only when read.
    ``before``: the stored document the write replaced (an update's always, a replacement's
    or a delete's when the collection keeps pre-images), decoded only when read.
    ``images``: the collection had ``changeStreamPreAndPostImages`` enabled at the write."""

    position: int
    cluster_time: Timestamp
    wall_time: datetime.datetime
    db: str
    coll: str
    operation_type: str
    document_key: dict[str, Any]
    full_document: dict[str, Any] | _Inserted | None
    before: Any = None
    images: bool = False


class _PreImage:
    """The stored document a write replaced, carried to the history by reference, never copied.

    mongoeco's change payload has no field for it: it rides in ``update_description``,
    which the engine always leaves empty, and survives the engine's deep copies of payloads."""

    __slots__ = ("stored",)

    def __init__(self, stored: Any) -> None:
        self.stored = stored

    def __deepcopy__(self, memo: dict[int, Any]) -> _PreImage:
        return self


class _Inserted(_PreImage):
    """(bu) The stored document an insert wrote, carried to the history by reference as the event's
    full document, never copied: mongoeco's payload deep-copies the inserted document for the history
    (and its outbox four times more), a private copy of every document the history holds, which the
    history then frees as the event leaves it (cold: inserted long before), one document's objects
    for every write once the history is full."""

    __slots__ = ()


_overwritten = threading.local()  # the stored document the engine's last write replaced (its lock is held)
_inserting = threading.local()  # (bu) inserts in flight (their depth) and the documents encoded meanwhile


def _encoded_by_insert(document: Any, stored: Any) -> None:
    """Note the stored form of a document encoded while an insert is in flight, under the document's identity."""
    if getattr(_inserting, "depth", 0):
        _inserting.encoded[id(document)] = (document, stored)


def _take_inserted(document: Any) -> _Inserted | None:
    """The stored form encoded from this very document (not an equal one) while an insert is in flight, or None."""
    if not getattr(_inserting, "depth", 0):
        return None
    noted = _inserting.encoded.pop(id(document), None)
    return _Inserted(noted[1]) if noted is not None and noted[0] is document else None


#: (cc) The mark of the wrapper of MemoryEngine._set_storage_document_locked that notes the replaced document.
PRE_IMAGE_LAYER = "pre-image"


def replaced(stored: Any) -> _PreImage:
    """The pre-image of a write made without the noting wrapper, by a caller that holds the stored
    document it replaces: what that wrapper's note and :func:`take_pre_image` give. A note no payload
    took (a commit's merge leaves its last one) is dropped, as that write's note would have replaced it."""
    _overwritten.stored = None
    return _PreImage(stored)


def take_pre_image() -> _PreImage | None:
    """The stored document the engine's last write replaced, as a payload's pre-image, and forget it
    (a change record built outside ``MemoryEngine._change_payload`` must take it too, or the next
    record would carry it)."""
    stored, _overwritten.stored = getattr(_overwritten, "stored", None), None
    return None if stored is None else _PreImage(stored)


@dataclasses.dataclass(frozen=True, slots=True)
class StreamPoint:
    """A place in the history: after the event at ``position`` (0: before the first)."""

    position: int
    cluster_time: Timestamp

    def token(self) -> dict[str, str]:
        """The opaque resume token mongod-style clients store and hand back."""
        data = struct.pack(_TOKEN_FORMAT, _TOKEN_VERSION, self.cluster_time.time,
                           self.cluster_time.inc, self.position)
        return {"_data": data.hex().upper()}

    @classmethod
    def from_token(cls, token: object) -> StreamPoint:
        data = token.get("_data") if isinstance(token, dict) else None
        if not isinstance(data, str):
            raise _failure(40647, "Location40647",
                           "The change stream resume token has a missing or wrong-typed _data field.")
        try:
            version, seconds, inc, position = struct.unpack(_TOKEN_FORMAT, bytes.fromhex(data))
        except (ValueError, struct.error):
            version = None
        if version != _TOKEN_VERSION:
            raise _failure(260, "InvalidResumeToken", "resume token was not issued by this server")
        return cls(position, Timestamp(seconds, inc))


class ClusterClock:
    """Monotonic cluster times: (seconds, increment), the increment restarting each second."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._last = Timestamp(int(clock()), 0)

    @property
    def last(self) -> Timestamp:
        return self._last

    def tick(self) -> tuple[Timestamp, datetime.datetime]:
        now = self._clock()
        seconds = int(now)
        if seconds > self._last.time:
            self._last = Timestamp(seconds, 1)
        else:
            self._last = Timestamp(self._last.time, self._last.inc + 1)
        wall = datetime.datetime.fromtimestamp(now, tz=datetime.UTC).replace(tzinfo=None)
        return self._last, wall.replace(microsecond=wall.microsecond // 1000 * 1000)


class ChangeHistory(ChangeStreamHub):
    """The server's change history: mongoeco's change sink, kept without watchers and bounded.

    The memory engine calls :meth:`publish` once per committed write, in commit order
    (its ``commit-sequence`` delivery); this class keeps its own events instead of the
    hub's list, and reuses only the hub's lock and async waiters.
    """

    def __init__(self, max_events: int = DEFAULT_MAX_EVENTS, *, clock: Callable[[], float] = time.time) -> None:
        if not isinstance(max_events, int) or isinstance(max_events, bool) or max_events < 1:
            raise ValueError("the change history needs a positive number of events")
        super().__init__(max_retained_events=None)
        self.max_events = max_events
        self._clock = ClusterClock(clock)
        self._history: deque[ChangeEvent] = deque()
        self._last_position = 0
        # The newest point no longer held: resuming at or before it is history lost.
        self._lost = StreamPoint(0, self._clock.last)
        self.cursors: dict[int, StreamCursor] = {}
        self._cursor_ids = itertools.count(_CURSOR_ID_BASE + 1)
        # Set by attach_history from the engine: a stored document's decoding, and whether a
        # collection keeps pre- and post-images (its changeStreamPreAndPostImages option).
        self.decode: Callable[[Any], dict[str, Any]] | None = None
        self.images_enabled: Callable[[str, str], bool] = lambda db, coll: False

    @property
    def clock(self) -> ClusterClock:
        """The server's cluster clock: one tick per event (the replica-set layer reads it too)."""
        return self._clock

    # -- mongoeco's sink interface -------------------------------------------------
    def should_publish_events(self) -> bool:
        # mongoeco records a gap instead of the event unless this says yes.
        return not self._closed

    def publish(self, *, operation_type: str, **payload: Any) -> None:
        # drop/rename/invalidate notices go to the hub outside the commit sequence:
        # they are not history events (documented) and must not consume a sequence number.
        if operation_type in _EVENT_TYPES:
            super().publish(operation_type=operation_type, **payload)

    def _append_committed_event_locked(self, event: Any) -> None:
        self.record_locked(
            event.token, event.operation_type, event.db_name, event.coll_name, event.document_key,
            event.full_document, event.update_description,
        )

    def record_locked(
        self, token: int, kind: str, db: str, coll: str, document_key: Any, full_document: Any, carried: Any,
        images: bool | None = None,
    ) -> None:
        """Record the committed event of commit sequence ``token`` (the hub's event's fields, under the
        hub's lock). ``images``: whether the collection keeps pre-images, when the caller knows it
        (None: looked up)."""
        self._next_token = token + 1
        cluster_time, wall_time = self._clock.tick()
        self._last_position += 1
        if images is None:
            images = kind != "insert" and self.images_enabled(db, coll)
        before = carried.stored if isinstance(carried, _PreImage) and (kind == "update" or images) else None
        document = full_document if kind in {"insert", "replace", "update"} else None
        self._history.append(ChangeEvent(
            self._last_position, cluster_time, wall_time, db, coll, kind, dict(document_key), document, before, images,
        ))
        while len(self._history) > self.max_events:
            dropped = self._history.popleft()
            self._lost = StreamPoint(dropped.position, dropped.cluster_time)
        self._wake_async_waiters_locked()

    # -- reading -------------------------------------------------------------------
    def forget(self) -> None:
        """Drop everything recorded so far (the snapshot load is not history)."""
        with self._condition:
            self._lost = self.end()
            self._history.clear()
            # Replies carry the clock as their operationTime: it moves past the forgotten point,
            # so a stream started at that time is not history lost.
            self._clock.tick()

    def end(self) -> StreamPoint:
        """The point after the newest event."""
        with self._condition:
            if self._history:
                newest = self._history[-1]
                return StreamPoint(newest.position, newest.cluster_time)
            return self._lost

    def resolve(self, point: StreamPoint) -> StreamPoint:
        """Check that ``point`` was issued here and that every event after it is still held."""
        with self._condition:
            if point.position > self._last_position:
                raise _failure(*_TOKEN_NOT_FOUND)
            if point.position < self._lost.position:
                raise _failure(*_HISTORY_LOST)
            held = self._event_at_locked(point.position)
            expected = self._lost.cluster_time if held is None else held.cluster_time
            if point.cluster_time != expected:
                raise _failure(*_TOKEN_NOT_FOUND)
            return point

    def at_time(self, cluster_time: Timestamp) -> StreamPoint:
        """The point just before the first event at or after ``cluster_time``."""
        with self._condition:
            lost = _order(self._lost.cluster_time)
            # The start stamp has increment 0; a dropped event's time is itself lost.
            if _order(cluster_time) < lost or (_order(cluster_time) == lost and lost[1] > 0):
                raise _failure(*_HISTORY_LOST)
            before = self._lost
            for event in self._history:
                if _order(event.cluster_time) >= _order(cluster_time):
                    break
                before = StreamPoint(event.position, event.cluster_time)
            return before

    def _event_at_locked(self, position: int) -> ChangeEvent | None:
        if not self._history or position < self._history[0].position:
            return None
        index = position - self._history[0].position
        return self._history[index] if index < len(self._history) else None

    def events_after(self, position: int, limit: int) -> list[ChangeEvent]:
        """Up to ``limit`` events after ``position``; 286 (as mongod) if some were dropped meanwhile."""
        with self._condition:
            if position < self._lost.position:
                raise _failure(*_HISTORY_LOST)
            if self._publish_failure is not None:  # mongoeco stopped delivering: events would be missed
                raise _failure(280, "ChangeStreamFatalError", "change history stopped recording")
            if not self._history:
                return []
            start = max(0, position + 1 - self._history[0].position)
            # Index from the newest end: readers are near it, and a deque indexes fast at its ends.
            return [self._history[i] for i in range(start, min(start + limit, len(self._history)))]

    async def wait_after(self, position: int, timeout: float) -> None:  # noqa: ASYNC109 - a getMore's await: it returns at the timeout
        """Return once an event after ``position`` exists, or after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        registration = (loop, waiter)
        with self._condition:
            if self._last_position > position or self._closed:
                return
            self._async_waiters.add(registration)
        try:
            await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            pass
        finally:
            with self._condition:
                self._async_waiters.discard(registration)

    def open_cursor(self, cursor: StreamCursor) -> int:
        cursor_id = next(self._cursor_ids)
        self.cursors[cursor_id] = cursor
        return cursor_id


def is_change_stream_cursor(cursor_id: object) -> bool:
    """Whether a getMore's cursor id names one of the change-stream cursors served here."""
    return _positive(cursor_id, 0) > _CURSOR_ID_BASE


def attach_history(client: Any, max_events: int) -> ChangeHistory:
    """Make a new ChangeHistory the change sink of a fresh mongoeco ``AsyncMongoClient``.

    The client builds its own hub in ``__init__`` and takes none as an argument; every
    database and collection it hands out later reads ``client._change_hub``.
    """
    history = ChangeHistory(max_events)
    client._change_hub.close()
    client._change_hub = history
    engine = client._engine

    def images_enabled(db: str, coll: str) -> bool:
        options = engine._collection_options.get(db, {}).get(coll) or {}
        setting = options.get("changeStreamPreAndPostImages")
        return isinstance(setting, dict) and setting.get("enabled") is True

    history.decode = lambda stored: copy.deepcopy(engine._borrow_storage_document(stored))
    history.images_enabled = images_enabled
    return history


@dataclasses.dataclass(slots=True)
class StreamCursor:
    """An open change stream: its scope, stages and the point it has read up to."""

    db: str
    coll: str | None  # None: every collection of db (db None too: the whole cluster)
    cluster: bool
    stages: list[dict[str, Any]]
    full_document: str
    point: StreamPoint
    before_change: str = "off"
    expanded: bool = False

    @property
    def ns(self) -> str:
        return f"{self.db}.{self.coll if self.coll is not None else _WHOLE_DATABASE}"

    def covers(self, event: ChangeEvent) -> bool:
        if self.cluster:
            return True
        return event.db == self.db and (self.coll is None or event.coll == self.coll)


def _parse_stage(spec: object, cluster_allowed: bool) -> dict[str, Any]:
    if not isinstance(spec, dict):
        raise _failure(50808, "Location50808", "$changeStream stage expects a document as argument")
    unknown = sorted(set(spec) - _STAGE_OPTIONS)
    if unknown:
        raise _failure(40415, "IDLUnknownField", f"BSON field '$changeStream.{unknown[0]}' is an unknown field.")
    if spec.get("allChangesForCluster") and not cluster_allowed:
        raise _failure(73, "InvalidNamespace",
                       "A $changeStream with 'allChangesForCluster:true' may only be opened on the 'admin' database")
    mode = spec.get("fullDocument", "default")
    if mode not in _FULL_DOCUMENT_MODES:
        raise _bad_value(f"unsupported fullDocument mode '{mode}'")
    if spec.get("fullDocumentBeforeChange", "off") not in _BEFORE_CHANGE_MODES:
        raise _bad_value(f"unsupported fullDocumentBeforeChange mode '{spec.get('fullDocumentBeforeChange')}'")
    if "resumeAfter" in spec and "startAfter" in spec:
        raise _failure(50865, "Location50865",
                       "Do not specify both 'resumeAfter' and 'startAfter' in a $changeStream stage")
    if "startAtOperationTime" in spec and ("resumeAfter" in spec or "startAfter" in spec):
        raise _failure(40674, "Location40674", "Only one type of resume option is allowed, but multiple were found")
    return spec


def _start_point(history: ChangeHistory, spec: dict[str, Any]) -> StreamPoint:
    token = spec.get("resumeAfter", spec.get("startAfter"))
    if token is not None:
        return history.resolve(StreamPoint.from_token(token))
    at = spec.get("startAtOperationTime")
    if at is not None:
        if not isinstance(at, Timestamp):
            raise _failure(14, "TypeMismatch", "startAtOperationTime must be a timestamp")
        return history.at_time(at)
    return history.end()


def _image_missing(which: str) -> OperationFailure:
    return _failure(
        47, "NoMatchingDocument",
        f"Change stream was configured to require a {which} for all update, delete and replace events, "
        f"but the {which} was not found for an event.",
    )


def _pre_image(history: ChangeHistory, event: ChangeEvent) -> dict[str, Any] | None:
    """The document before the write, if the history kept it (and it is the event's document)."""
    if event.before is None or history.decode is None:
        return None
    document = history.decode(event.before)
    return document if document.get("_id") == event.document_key.get("_id") else None


def _full_document(history: ChangeHistory, event: ChangeEvent) -> dict[str, Any] | None:
    """An insert's or a replacement's document: (bu) an insert's decoded from the stored document it wrote."""
    document = event.full_document
    if isinstance(document, _Inserted):
        if history.decode is None:
            raise _failure(280, "ChangeStreamFatalError", "change history cannot read its documents")
        return history.decode(document.stored)
    return document


def _same(left: object, right: object) -> bool:
    """Equal values of equal types (mongod compares a document's old and new bytes)."""
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        assert isinstance(right, dict)
        return list(left) == list(right) and all(_same(left[key], right[key]) for key in left)
    if isinstance(left, list):
        assert isinstance(right, list)
        return len(left) == len(right) and all(_same(a, b) for a, b in zip(left, right, strict=True))
    return left == right


def _diff(before: Any, after: Any, path: tuple[str | int, ...], found: dict[str, list[Any]]) -> None:
    """An update's description, as mongod derives it from the document's old and new versions:
    changed or added fields by path, removed fields, arrays cut short (element by element)."""
    if isinstance(before, dict) and isinstance(after, dict):
        for key in before:
            if key not in after:
                found["removed"].append((*path, key))
        for key, value in after.items():
            if key not in before:
                found["updated"].append(((*path, key), value))
            elif not _same(before[key], value):
                old = before[key]
                if (isinstance(old, dict) and isinstance(value, dict)) or (isinstance(old, list) and isinstance(value, list)):
                    _diff(old, value, (*path, key), found)
                else:
                    found["updated"].append(((*path, key), value))
        return
    assert isinstance(before, list) and isinstance(after, list)
    for index, value in enumerate(after):
        if index >= len(before):
            found["updated"].append(((*path, index), value))
        elif not _same(before[index], value):
            old = before[index]
            if (isinstance(old, dict) and isinstance(value, dict)) or (isinstance(old, list) and isinstance(value, list)):
                _diff(old, value, (*path, index), found)
            else:
                found["updated"].append(((*path, index), value))
    if len(after) < len(before):
        found["truncated"].append((path, len(after)))


def _dotted(path: tuple[str | int, ...]) -> str:
    return ".".join(str(part) for part in path)


def _update_description(before: dict[str, Any], after: dict[str, Any], expanded: bool) -> dict[str, Any]:
    found: dict[str, list[Any]] = {"updated": [], "removed": [], "truncated": []}
    _diff(before, after, (), found)
    description: dict[str, Any] = {
        "updatedFields": {_dotted(path): value for path, value in found["updated"]},
        "removedFields": [_dotted(path) for path in found["removed"]],
        "truncatedArrays": [{"field": _dotted(path), "newSize": size} for path, size in found["truncated"]],
    }
    if expanded:
        # A path whose dotted form is ambiguous (a numeric field name, or one with a dot) is
        # also given as its parts, array indexes as integers.
        paths = [path for path, _ in found["updated"]] + found["removed"] + [path for path, _ in found["truncated"]]
        description["disambiguatedPaths"] = {
            _dotted(path): list(path)
            for path in paths
            if any(isinstance(part, str) and (part.isdigit() or "." in part) for part in path)
        }
    return description


async def _event_document(client: Any, history: ChangeHistory, cursor: StreamCursor, event: ChangeEvent) -> dict[str, Any]:
    """The event as mongod shapes it (key order included)."""
    point = StreamPoint(event.position, event.cluster_time)
    document: dict[str, Any] = {
        "_id": point.token(),
        "operationType": event.operation_type,
        "clusterTime": event.cluster_time,
        "wallTime": event.wall_time,
    }
    if event.operation_type in {"insert", "replace"}:
        document["fullDocument"] = _full_document(history, event)
    elif event.operation_type == "update" and cursor.full_document != "default":
        if cursor.full_document == "updateLookup":
            document["fullDocument"] = await client[event.db][event.coll].find_one(event.document_key)
        elif event.images and event.full_document is not None:
            document["fullDocument"] = copy.deepcopy(event.full_document)  # the post-image
        elif cursor.full_document == "whenAvailable":
            document["fullDocument"] = None
        else:
            raise _image_missing("post-image")
    document["ns"] = {"db": event.db, "coll": event.coll}
    document["documentKey"] = event.document_key
    before = _pre_image(history, event) if event.operation_type != "insert" else None
    if event.operation_type == "update" and before is not None and isinstance(event.full_document, dict):
        document["updateDescription"] = _update_description(before, event.full_document, cursor.expanded)
    if cursor.before_change != "off" and event.operation_type in {"update", "replace", "delete"}:
        if event.images and before is not None:
            document["fullDocumentBeforeChange"] = before
        elif cursor.before_change == "whenAvailable":
            document["fullDocumentBeforeChange"] = None
        else:
            raise _image_missing("pre-image")
    return document


def patch_pre_images() -> None:
    """(q) The document a write replaces reaches the history with the write's event.

    mongoeco's change payloads (MemoryEngine._change_payload) carry no pre-image. Every
    engine write goes through _set_storage_document_locked / _delete_storage_document_locked
    (under the engine lock), which now note the stored document they replace; the payload
    built next, of an update, replacement or delete, takes it by reference (no copy).

    (bu) An insert's payload carries the stored document the insert wrote, by reference, instead
    of a deep copy of the inserted document: _insert_documents_impl encodes each document it
    writes, then builds the payloads from the same document objects, under its collection's lock
    and without awaiting in between; the stored forms encoded while an insert is in flight are
    noted by the identity of the document they were encoded from (which the note holds, so the
    identity is not reused), taken by its payload, and dropped as any insert call ends (no other
    call's writes can fall between one call's writes and its payloads)."""
    from mongoeco.engines import memory

    engine_class = memory.MemoryEngine
    original_set = engine_class._set_storage_document_locked
    original_delete = engine_class._delete_storage_document_locked
    original_payload = engine_class._change_payload
    original_insert = engine_class._insert_documents_impl
    original_encode = engine_class._encode_storage_document

    def set_document(self: Any, collection: Any, storage_key: Any, document: Any) -> None:
        _overwritten.stored = collection.get(storage_key)
        original_set(self, collection, storage_key, document)

    set_document.__wrapped__ = original_set  # type: ignore[attr-defined]
    set_document.mongoshift_layer = PRE_IMAGE_LAYER  # type: ignore[attr-defined]  # what a batch may do instead (patches/updates.py)

    def encode_document(self: Any, document: Any) -> Any:
        stored = original_encode(self, document)
        _encoded_by_insert(document, stored)
        return stored

    def delete_document(self: Any, collection: Any, storage_key: Any) -> None:
        _overwritten.stored = collection.get(storage_key)
        original_delete(self, collection, storage_key)

    def change_payload_with_pre_image(self: Any, **fields: Any) -> Any:
        payload = original_payload(**fields)
        before = take_pre_image()
        if before is not None and fields.get("operation_type") in {"update", "replace", "delete"}:
            payload["update_description"] = before
        return payload

    def change_payload(self: Any, **fields: Any) -> Any:
        if fields.get("operation_type") == "insert":
            inserted = _take_inserted(fields.get("full_document"))
            if inserted is not None:
                payload = original_payload(**{**fields, "full_document": None})
                payload["full_document"] = inserted
                take_pre_image()
                return payload
        return change_payload_with_pre_image(self, **fields)

    change_payload.__wrapped__ = change_payload_with_pre_image  # type: ignore[attr-defined]  # the payload before (bu), for the tests

    async def insert_documents(self: Any, *args: Any, **kwargs: Any) -> Any:
        depth = getattr(_inserting, "depth", 0)
        if not depth:
            _inserting.encoded = {}
        _inserting.depth = depth + 1
        try:
            return await original_insert(self, *args, **kwargs)
        finally:
            _inserting.depth -= 1
            _inserting.encoded = {}

    engine_class._set_storage_document_locked = set_document
    engine_class._delete_storage_document_locked = delete_document
    engine_class._change_payload = change_payload  # type: ignore[assignment]  # an instance's method now: its engine's calls
    engine_class._insert_documents_impl = insert_documents
    engine_class._encode_storage_document = encode_document


async def _next_batch(client: Any, history: ChangeHistory, cursor: StreamCursor, limit: int) -> list[dict[str, Any]]:
    """Read on from the cursor's point: the events in its scope that pass its stages."""
    from mongoeco.core.aggregation import apply_pipeline

    batch: list[dict[str, Any]] = []
    while len(batch) < limit:
        events = history.events_after(cursor.point.position, limit - len(batch))
        if not events:
            break
        for event in events:
            cursor.point = StreamPoint(event.position, event.cluster_time)
            if not cursor.covers(event):
                continue
            document = await _event_document(client, history, cursor, event)
            if cursor.stages:
                results = apply_pipeline([document], cursor.stages)
                for result in results:
                    if result.get("_id") != document["_id"]:
                        raise _failure(280, "ChangeStreamFatalError", _TOKEN_MODIFIED)
                batch.extend(results)
            else:
                batch.append(document)
    return batch


def _reply(cursor_id: int, cursor: StreamCursor, key: str, batch: list[dict[str, Any]]) -> dict[str, Any]:
    from bson.int64 import Int64

    return {
        "cursor": {
            key: batch,
            "postBatchResumeToken": cursor.point.token(),
            "id": Int64(cursor_id),
            "ns": cursor.ns,
        },
        "ok": 1.0,
    }


def _positive(value: object, default: int) -> int:
    value = getattr(value, "value", value)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return default


async def _aggregate(client: Any, history: ChangeHistory, context: Any) -> dict[str, Any]:
    command = context.command_document
    if context.raw_body.get("autocommit") is False:
        raise _failure(263, "OperationNotSupportedInTransaction",
                       "Operation not permitted in transaction :: caused by :: $changeStream")
    pipeline = command["pipeline"]
    target = command.get("aggregate")
    cluster = context.db_name == "admin"
    spec = _parse_stage(pipeline[0]["$changeStream"], cluster)
    if cluster and not spec.get("allChangesForCluster"):
        raise _failure(73, "InvalidNamespace", "$changeStream may not be opened on the internal admin database")
    for stage in pipeline[1:]:
        if not isinstance(stage, dict) or len(stage) != 1:
            raise _bad_value("a pipeline stage must be a document with one field")
        name = next(iter(stage))
        if name not in _STREAM_STAGES:
            if name not in _KNOWN_STAGES:  # mongod's parser refuses an unknown name before anything else
                raise _failure(40324, "Location40324", f"Unrecognized pipeline stage name: '{name}'")
            raise _failure(31324, "Location31324", f"Illegal stage in a $changeStream pipeline: {name}")
    cursor = StreamCursor(
        db=context.db_name,
        coll=target if isinstance(target, str) and target != _WHOLE_DATABASE else None,
        cluster=cluster,
        stages=list(pipeline[1:]),
        full_document=spec.get("fullDocument", "default"),
        point=_start_point(history, spec),
        before_change=spec.get("fullDocumentBeforeChange", "off"),
        expanded=spec.get("showExpandedEvents") is True,
    )
    options = command.get("cursor") or {}
    batch = await _next_batch(client, history, cursor, _positive(options.get("batchSize"), DEFAULT_FIRST_BATCH))
    return _reply(history.open_cursor(cursor), cursor, "firstBatch", batch)


async def _get_more(client: Any, history: ChangeHistory, context: Any, cursor_id: int) -> dict[str, Any]:
    command = context.command_document
    cursor = history.cursors.get(cursor_id)
    if cursor is None:
        raise _failure(43, "CursorNotFound", f"cursor id {cursor_id} not found")
    limit = _positive(command.get("batchSize"), 1_000_000)
    deadline = time.monotonic() + _positive(command.get("maxTimeMS"), DEFAULT_AWAIT_MS) / 1000
    try:
        batch = await _next_batch(client, history, cursor, limit)
        while not batch and (remaining := deadline - time.monotonic()) > 0:
            await history.wait_after(cursor.point.position, remaining)
            batch = await _next_batch(client, history, cursor, limit)
    except OperationFailure:
        history.cursors.pop(cursor_id, None)
        raise
    return _reply(cursor_id, cursor, "nextBatch", batch)


def _kill(history: ChangeHistory, command: dict[str, Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """Kill the change-stream cursors named; return (killed, not found, ids of other cursors)."""
    killed, not_found, others = [], [], []
    for cursor_id in command.get("cursors") or []:
        number = _positive(cursor_id, 0)
        if number <= _CURSOR_ID_BASE:
            others.append(cursor_id)
        elif history.cursors.pop(number, None) is not None:
            killed.append(cursor_id)
        else:
            not_found.append(cursor_id)
    return killed, not_found, others


def _is_change_stream(command: dict[str, Any]) -> bool:
    pipeline = command.get("pipeline")
    return bool(pipeline) and isinstance(pipeline, list) and isinstance(pipeline[0], dict) \
        and "$changeStream" in pipeline[0]


def _passable(body: dict[str, Any]) -> dict[str, Any]:
    """What mongoeco's wire validation lets through: a database-level ``aggregate: 1`` stream
    gets a stand-in collection name, and getMore/killCursors take the 64-bit cursor ids
    mongod replies with (and drivers send back) as plain integers."""
    if body.get("aggregate") == 1 and _is_change_stream(body):
        return {**body, "aggregate": _WHOLE_DATABASE}
    if isinstance(body.get("getMore"), BsonInt64):
        return {**body, "getMore": body["getMore"].value}
    cursors = body.get("cursors")
    if "killCursors" in body and isinstance(cursors, list) and any(isinstance(c, BsonInt64) for c in cursors):
        return {**body, "cursors": [c.value if isinstance(c, BsonInt64) else c for c in cursors]}
    return body


def patch_update_events() -> None:
    """(q) An update's event goes to the history without its post-image and update description.

    The history keeps neither (``updateLookup`` reads the document when the event is read, and
    ``updateDescription`` is not given), but mongoeco deep-copies both on every update: about a
    fifth of an update's cost on this server, paid by every write whether anyone watches or not."""
    from mongoeco.api._async._collection_runtime import CollectionRuntimeCoordinator

    publish = CollectionRuntimeCoordinator.publish_change_event

    def publish_lean(self: Any, *, operation_type: str, **kwargs: Any) -> None:
        if operation_type == "update":
            kwargs["full_document"] = kwargs["update_description"] = None
        publish(self, operation_type=operation_type, **kwargs)

    CollectionRuntimeCoordinator.publish_change_event = publish_lean


def patch_wire() -> None:
    """(q) Serve $changeStream, and getMore/killCursors on its cursors, before mongoeco's dispatch.

    mongoeco's wire validation runs first, so requests are made passable for it (:func:`_passable`).
    """
    from mongoeco.wire._executor_handlers import WireSpecialCommandHandlers
    from mongoeco.wire.executor import WireCommandExecutor

    build_request_context = WireCommandExecutor._build_request_context

    def build_with_plain_ids(self: Any, body: dict[str, Any], **kwargs: Any) -> Any:
        return build_request_context(self, _passable(body), **kwargs)

    WireCommandExecutor._build_request_context = build_with_plain_ids
    original = WireSpecialCommandHandlers.dispatch

    async def dispatch(self: Any, context: Any) -> dict[str, object]:
        history = getattr(self._client, "_change_hub", None)
        if not isinstance(history, ChangeHistory):
            return await original(self, context)
        name, command = context.command_name, context.command_document
        if name == "aggregate" and _is_change_stream(command):
            return await _aggregate(self._client, history, context)
        if name == "getMore" and _positive(command.get("getMore"), 0) > _CURSOR_ID_BASE:
            return await _get_more(self._client, history, context, _positive(command.get("getMore"), 0))
        if name == "killCursors" and any(_positive(c, 0) > _CURSOR_ID_BASE for c in command.get("cursors") or []):
            killed, not_found, others = _kill(history, command)
            reply: dict[str, Any] = {"cursorsKilled": killed, "cursorsNotFound": not_found, "cursorsAlive": [],
                                     "cursorsUnknown": [], "ok": 1.0}
            if others:
                rest = await original(self, dataclasses.replace(context, command_document={**command, "cursors": others}))
                for key in ("cursorsKilled", "cursorsNotFound", "cursorsAlive", "cursorsUnknown"):
                    reply[key] = reply[key] + list(rest.get(key, []))  # type: ignore[call-overload]  # mongoeco types a reply's values as object: these are lists
            return reply
        return await original(self, context)

    WireSpecialCommandHandlers.dispatch = dispatch
