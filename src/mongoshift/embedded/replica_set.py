"""The embedded server as a MongoDB 7.0 single-node replica set (or, on request, a standalone).

mongoeco answers ``hello`` as a standalone: drivers then never retry writes, commits or
aborts, and tests written for a replica set behave differently here than on mongod.
This module holds what makes the server present itself as mongod's single-node
replica set does:

* :class:`ReplicaSet`, the set's identity (name, the advertised ``host:port``,
  election id, topology version) and its cluster clock (the change history's, so an
  ``operationTime`` and the change events it covers share one timeline);
* :func:`hello_reply`, the one builder of ``hello``/``isMaster`` replies, and
  :func:`await_topology_change` for an awaitable ``hello`` (the driver's streaming
  monitor);
* :func:`error_labels`, the labels mongod adds itself (``src/mongo/db/error_labels.cpp``);
* the ``getParameter`` and ``buildInfo`` replies.

A standalone (``standalone=True``) keeps mongoeco's standalone ``hello`` and gossips
no cluster time; :mod:`mongoshift.embedded.patches.replica_set` adds its refusals.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime
from typing import Any

from bson import Binary, Int64, ObjectId
from mongoeco.types import Timestamp

from mongoshift.embedded.change_streams import ChangeHistory, ClusterClock
from mongoshift.embedded.fail_points import FailPoints
from mongoshift.embedded.retryable_writes import RetryableWrites

DEFAULT_SET_NAME = "mongoshift"
#: MongoDB 7.0's wire version: the version mongoeco's buildInfo reports.
MAX_WIRE_VERSION = 21
LOGICAL_SESSION_TIMEOUT_MINUTES = 30
# The election id mongod's first election of a single-node set gives (term 1).
_ELECTION_ID = ObjectId("7fffffff0000000000000001")
_TERM = Int64(1)
_SIGNATURE = {"hash": Binary(b"\x00" * 20), "keyId": Int64(0)}  # no keys: auth is off
_MAX_AWAIT_MS = 600_000

# Error code categories of src/mongo/base/error_codes.yml (7.0), as error_labels.cpp uses them.
RETRIABLE_CODES = frozenset({6, 7, 89, 91, 134, 189, 262, 317, 358, 384, 9001, 10107, 11600, 11602, 13435, 13436, 50915})
NETWORK_CODES = frozenset({6, 7, 89, 317, 384, 9001})
NEED_RETARGETTING_CODES = frozenset({63, 150, 13388})
SNAPSHOT_CODES = frozenset({239, 246, 250, 272})
NON_RESUMABLE_CHANGE_STREAM_CODES = frozenset({280, 286})
_TRANSIENT_CODES = frozenset({112, 24, 267, 343, 249})  # WriteConflict, LockTimeout, PreparedTransactionInProgress...
_RETRY_CHANGE_STREAM = 234
_FAILED_TO_SATISFY_READ_PREFERENCE = 133
_NO_SUCH_TRANSACTION = 251
_COMMIT_OR_ABORT = frozenset({"commitTransaction", "abortTransaction"})

TRANSIENT_TRANSACTION_ERROR = "TransientTransactionError"
RETRYABLE_WRITE_ERROR = "RetryableWriteError"
RESUMABLE_CHANGE_STREAM_ERROR = "ResumableChangeStreamError"
NON_RESUMABLE_CHANGE_STREAM_ERROR = "NonResumableChangeStreamError"

#: mongod's names for the codes a test or a fail point commonly produces (codeName).
CODE_NAMES: dict[int, str] = {
    1: "InternalError", 2: "BadValue", 6: "HostUnreachable", 7: "HostNotFound", 8: "UnknownError",
    9: "FailedToParse", 11: "UserNotFound", 13: "Unauthorized", 14: "TypeMismatch", 18: "AuthenticationFailed",
    20: "IllegalOperation", 24: "LockTimeout", 26: "NamespaceNotFound", 27: "IndexNotFound",
    43: "CursorNotFound", 48: "NamespaceExists", 50: "MaxTimeMSExpired", 51: "ManualInterventionRequired",
    59: "CommandNotFound", 63: "OBSOLETE_StaleShardVersion", 64: "WriteConcernFailed", 67: "CannotCreateIndex",
    72: "InvalidOptions", 79: "UnknownReplWriteConcern", 85: "IndexOptionsConflict", 86: "IndexKeySpecsConflict",
    89: "NetworkTimeout", 91: "ShutdownInProgress", 96: "OperationFailed", 100: "UnsatisfiableWriteConcern",
    112: "WriteConflict", 115: "CommandNotSupported", 121: "DocumentValidationFailure", 123: "NotAReplicaSet",
    125: "CommandFailed", 133: "FailedToSatisfyReadPreference", 134: "ReadConcernMajorityNotAvailableYet",
    150: "StaleEpoch", 166: "CommandNotSupportedOnView", 175: "QueryPlanKilled", 189: "PrimarySteppedDown",
    216: "ElectionInProgress", 217: "IncompleteTransactionHistory", 225: "TransactionTooOld",
    234: "RetryChangeStream", 237: "CursorKilled", 239: "SnapshotTooOld", 244: "TransactionAborted",
    246: "SnapshotUnavailable", 251: "NoSuchTransaction", 256: "TransactionCommitted", 257: "TransactionTooLarge",
    262: "ExceededTimeLimit", 263: "OperationNotSupportedInTransaction", 267: "PreparedTransactionInProgress",
    280: "ChangeStreamFatalError", 286: "ChangeStreamHistoryLost", 9001: "SocketException",
    10107: "NotWritablePrimary", 11000: "DuplicateKey", 11600: "InterruptedAtShutdown", 11601: "Interrupted",
    11602: "InterruptedDueToReplStateChange", 13388: "StaleConfig", 13435: "NotPrimaryNoSecondaryOk",
    13436: "NotPrimaryOrSecondary", 31082: "SearchNotEnabled", 40573: "Location40573",
}


def code_name(code: int) -> str:
    """mongod's codeName for ``code`` (``Location<code>`` for the codes it has no name for)."""
    return CODE_NAMES.get(code, f"Location{code}")


@dataclasses.dataclass
class ReplicaSet:
    """One server's replica-set identity: a single member, always primary."""

    clock: ClusterClock
    standalone: bool = False
    set_name: str = DEFAULT_SET_NAME
    me: str = ""  # host:port as clients reach it, set once the server listens
    process_id: ObjectId = dataclasses.field(default_factory=ObjectId)
    started: datetime.datetime = dataclasses.field(default_factory=lambda: datetime.datetime.now(datetime.UTC))

    def cluster_time(self) -> Timestamp:
        """The latest cluster time: the time of the last write (or of the server's start)."""
        return self.clock.last

    def gossip(self) -> dict[str, Any]:
        """``$clusterTime`` and ``operationTime``, as every reply of a replica-set member carries them."""
        now = self.clock.last
        return {"$clusterTime": {"clusterTime": now, "signature": dict(_SIGNATURE)}, "operationTime": now}

    def topology_version(self) -> dict[str, Any]:
        # One member that never steps down: the counter never moves.
        return {"processId": self.process_id, "counter": Int64(0)}


class LocalSessions:
    """The sessions clients have used and not ended (``$listLocalSessions``), the most recent ``limit``."""

    def __init__(self, limit: int = 10_000) -> None:
        self._limit = limit
        self._sessions: collections.OrderedDict[str, tuple[dict[str, Any], datetime.datetime]] = collections.OrderedDict()

    def seen(self, key: str, lsid: dict[str, Any]) -> None:
        now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
        self._sessions[key] = (lsid, now.replace(microsecond=now.microsecond // 1000 * 1000))
        self._sessions.move_to_end(key)
        while len(self._sessions) > self._limit:
            self._sessions.popitem(last=False)

    def ended(self, key: str) -> None:
        self._sessions.pop(key, None)

    def listed(self) -> list[tuple[dict[str, Any], datetime.datetime]]:
        return list(self._sessions.values())


class SnapshotTooOld(Exception):
    """A snapshot read at a cluster time whose snapshot the server no longer holds."""


class SnapshotReads:
    """Snapshots for reads with ``readConcern: {level: "snapshot"}`` outside transactions.

    A snapshot read without ``atClusterTime`` reads at the latest cluster time, which its
    reply names; the session's later reads name that time back. Each time read at keeps
    an engine snapshot (a mongoeco session in a read-only transaction, taken when the
    time was current); the ``limit`` most recent are kept, older times are 239
    SnapshotTooOld (mongod keeps five minutes of history)."""

    def __init__(self, limit: int = 8) -> None:
        self._limit = limit
        self._sessions: collections.OrderedDict[tuple[int, int], Any] = collections.OrderedDict()

    def reader(self, client: Any, at: Timestamp | None, now: Timestamp) -> tuple[Any, Timestamp]:
        """The session holding the snapshot at ``at`` (the latest time when None or later), and that time."""
        wanted = now if at is None or (at.time, at.inc) >= (now.time, now.inc) else at
        key = (wanted.time, wanted.inc)
        session = self._sessions.get(key)
        if session is None:
            if wanted is not now:
                raise SnapshotTooOld(
                    "the snapshot at that cluster time is no longer held by the embedded server (it keeps the "
                    f"{self._limit} most recent ones)"
                )
            session = client.start_session()
            session.start_transaction()
            self._sessions[key] = session
            while len(self._sessions) > self._limit:
                _, oldest = self._sessions.popitem(last=False)
                oldest.close()  # aborts its transaction: the engine drops the snapshot
        else:
            self._sessions.move_to_end(key)
        return session, wanted

    def close(self) -> None:
        while self._sessions:
            self._sessions.popitem()[1].close()


@dataclasses.dataclass
class ServerState:
    """What one embedded server keeps besides its data: its identity, fail points, retryable
    writes and the sessions in use."""

    replica_set: ReplicaSet
    fail_points: FailPoints = dataclasses.field(default_factory=FailPoints)
    retryable: RetryableWrites = dataclasses.field(default_factory=RetryableWrites)
    sessions: LocalSessions = dataclasses.field(default_factory=LocalSessions)
    snapshots: SnapshotReads = dataclasses.field(default_factory=SnapshotReads)
    session_store: Any = None  # mongoeco's wire sessions (the proxy's), seen by the layer
    reaped: float = 0.0  # when transactions past their lifetime were last looked for (monotonic)


def attach(client: Any, history: ChangeHistory, *, standalone: bool = False, set_name: str = DEFAULT_SET_NAME) -> ServerState:
    """Give a mongoeco ``AsyncMongoClient`` (with ``history`` attached) its server state.

    The cluster clock is the change history's: every write's event ticks it, so a
    reply's ``operationTime`` is at or after the events of the writes it follows."""
    history.clock.tick()  # the set's first optime, as mongod's at initiation: no reply carries Timestamp(t, 0)
    state = ServerState(ReplicaSet(history.clock, standalone=standalone, set_name=set_name))
    client._mongoshift_server = state
    return state


def state_of(client: Any) -> ServerState | None:
    state = getattr(client, "_mongoshift_server", None)
    return state if isinstance(state, ServerState) else None


def _standalone_hello(command_name: str, body: dict[str, Any], connection_id: int) -> dict[str, Any]:
    """A standalone mongod's ``hello``, for callers without mongoeco's own reply at hand."""
    now = datetime.datetime.now(datetime.UTC)
    reply: dict[str, Any] = {"isWritablePrimary": True} if command_name == "hello" else {"ismaster": True}
    if body.get("helloOk") is True:
        reply["helloOk"] = True
    reply.update(
        {
            "maxBsonObjectSize": 16 * 1024 * 1024,
            "maxMessageSizeBytes": 48_000_000,
            "maxWriteBatchSize": 100_000,
            "localTime": now.replace(microsecond=now.microsecond // 1000 * 1000, tzinfo=None),
            "logicalSessionTimeoutMinutes": LOGICAL_SESSION_TIMEOUT_MINUTES,
            "connectionId": connection_id,
            "minWireVersion": 0,
            "maxWireVersion": MAX_WIRE_VERSION,
            "readOnly": False,
            "ok": 1.0,
        }
    )
    return reply


def hello_reply(
    replica_set: ReplicaSet,
    command_name: str,
    body: dict[str, Any],
    connection_id: int,
    base: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``hello`` (or legacy ``isMaster``) reply of a single-node replica set's primary.

    ``base`` is mongoeco's standalone reply (sizes, wire versions, connection id), kept
    as it is for a standalone apart from the wire version; without it (a caller that
    answers ``hello`` before mongoeco sees it) mongod's values are used. It reads no
    engine state, only the set's identity and the clock's latest time, so any thread may
    call it."""
    reply = dict(base) if base is not None else _standalone_hello(command_name, body, connection_id)
    reply["maxWireVersion"] = MAX_WIRE_VERSION
    if replica_set.standalone:
        return reply
    base = reply
    now = datetime.datetime.now(datetime.UTC)
    last = replica_set.clock.last
    op_time = {"ts": last, "t": _TERM}
    members = [replica_set.me]
    rs: dict[str, Any] = {
        "topologyVersion": replica_set.topology_version(),
        "hosts": members,
        "setName": replica_set.set_name,
        "setVersion": 1,
    }
    if command_name == "hello":
        rs["isWritablePrimary"] = True
    else:
        rs["ismaster"] = True
    rs.update(
        {
            "secondary": False,
            "primary": replica_set.me,
            "me": replica_set.me,
            "electionId": _ELECTION_ID,
            "lastWrite": {
                "opTime": op_time,
                "lastWriteDate": now.replace(microsecond=now.microsecond // 1000 * 1000, tzinfo=None),
                "majorityOpTime": dict(op_time),
                "majorityWriteDate": now.replace(microsecond=now.microsecond // 1000 * 1000, tzinfo=None),
            },
        }
    )
    for key in ("maxBsonObjectSize", "maxMessageSizeBytes", "maxWriteBatchSize", "localTime"):
        if key in base:
            rs[key] = base[key]
    rs["logicalSessionTimeoutMinutes"] = LOGICAL_SESSION_TIMEOUT_MINUTES
    rs["connectionId"] = connection_id
    rs["minWireVersion"] = base.get("minWireVersion", 0)
    rs["maxWireVersion"] = MAX_WIRE_VERSION
    rs["readOnly"] = False
    if body.get("helloOk") is True:
        rs["helloOk"] = True
    rs["ok"] = 1.0
    return rs


async def await_topology_change(replica_set: ReplicaSet, body: dict[str, Any]) -> None:
    """An awaitable ``hello`` (``topologyVersion`` + ``maxAwaitTimeMS``) waits for a change.

    The topology of a single member never changes, so a request naming the current
    version is answered after ``maxAwaitTimeMS``, as mongod does; an older or foreign
    version at once. The driver's streaming monitor would otherwise ask again at once,
    in a busy loop. Only this connection waits."""
    if replica_set.standalone:
        return
    version = body.get("topologyVersion")
    wait = body.get("maxAwaitTimeMS")
    wait = getattr(wait, "value", wait)
    if not isinstance(version, dict) or not isinstance(wait, int) or isinstance(wait, bool) or wait <= 0:
        return
    counter = version.get("counter")
    counter = getattr(counter, "value", counter)
    if version.get("processId") != replica_set.process_id or counter != 0:
        return
    await asyncio.sleep(min(wait, _MAX_AWAIT_MS) / 1000)


def is_change_stream(command_name: str, command: dict[str, Any], change_stream_cursor: bool) -> bool:
    if command_name == "getMore":
        return change_stream_cursor
    if command_name != "aggregate":
        return False
    pipeline = command.get("pipeline")
    return isinstance(pipeline, list) and bool(pipeline) and isinstance(pipeline[0], dict) and "$changeStream" in pipeline[0]


def error_labels(
    *,
    command_name: str,
    body: dict[str, Any],
    code: int | None,
    write_concern_code: int | None,
    change_stream: bool,
) -> list[str]:
    """The labels mongod adds to a reply by itself (``ErrorLabelBuilder::build``)."""
    labels: list[str] = []
    in_transaction = "txnNumber" in body and "autocommit" in body
    retryable_write = "txnNumber" in body and "autocommit" not in body
    commit_or_abort = command_name in _COMMIT_OR_ABORT
    if code is not None and in_transaction and _transient(code, write_concern_code is not None, commit_or_abort):
        return [TRANSIENT_TRANSACTION_ERROR]
    if (retryable_write or (in_transaction and commit_or_abort)) and (
        (code is not None and code in RETRIABLE_CODES)
        or (write_concern_code is not None and write_concern_code in RETRIABLE_CODES)
    ):
        return [RETRYABLE_WRITE_ERROR]
    if (
        change_stream
        and code is not None
        and write_concern_code is None
        and (
            code in RETRIABLE_CODES
            or code in NETWORK_CODES
            or code in NEED_RETARGETTING_CODES
            or code in (_RETRY_CHANGE_STREAM, _FAILED_TO_SATISFY_READ_PREFERENCE)
        )
    ):
        labels.append(RESUMABLE_CHANGE_STREAM_ERROR)
    elif code is not None and code in NON_RESUMABLE_CHANGE_STREAM_CODES:
        labels.append(NON_RESUMABLE_CHANGE_STREAM_ERROR)
    return labels


def _transient(code: int, has_write_concern_error: bool, commit_or_abort: bool) -> bool:
    """mongod's isTransientTransactionError."""
    if code in _TRANSIENT_CODES or code in SNAPSHOT_CODES or code in NEED_RETARGETTING_CODES:
        return True
    if commit_or_abort:
        return code == _NO_SUCH_TRANSACTION and not has_write_concern_error
    return code in RETRIABLE_CODES or code == _NO_SUCH_TRANSACTION


# -- getParameter and buildInfo -----------------------------------------------------------

def _parameters() -> dict[str, Any]:
    """What this server reports of mongod's server parameters (the ones drivers and test runners read)."""
    return {
        "authenticationMechanisms": ["SCRAM-SHA-1", "SCRAM-SHA-256"],
        "enableTestCommands": True,  # fail points work (mongod needs --setParameter enableTestCommands=1)
        "featureCompatibilityVersion": {"version": "7.0"},
        "logLevel": 0,
        "maxTransactionLockRequestTimeoutMillis": 5,
        "requireApiVersion": False,
        "transactionLifetimeLimitSeconds": 60,
        "cursorTimeoutMillis": Int64(600_000),
        "localLogicalSessionTimeoutMinutes": LOGICAL_SESSION_TIMEOUT_MINUTES,
    }


def get_parameter(command: dict[str, Any]) -> dict[str, Any]:
    """``getParameter: "*"`` (every parameter) or ``getParameter: 1, <name>: 1, ...``.

    Raises ``KeyError`` with mongod's message when no parameter asked for is known."""
    parameters = _parameters()
    if command.get("getParameter") == "*":
        return {**parameters, "ok": 1.0}
    asked = [key for key in command if key not in ("getParameter", "comment", "$db")]
    found = {key: parameters[key] for key in asked if key in parameters}
    if not found:
        raise KeyError("no option found to get")
    return {**found, "ok": 1.0}


def build_info(base: dict[str, Any]) -> dict[str, Any]:
    """``buildInfo``/``buildinfo``: mongoeco's version fields plus the ones mongod always sends."""
    reply = {key: value for key, value in base.items() if key != "ok"}
    reply.setdefault("version", "7.0.0")
    reply.update(
        {
            "bits": 64,
            "debug": False,
            "maxBsonObjectSize": 16 * 1024 * 1024,
            "modules": [],
            "ok": 1.0,
        }
    )
    return reply
