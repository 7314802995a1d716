"""What a MongoDB server error means: the one module that knows error codes and labels.

Every layer asks here instead of keeping its own numbers: the runner (does the
server support transactions?), the background engine (is this error the
document's, the batch's, or a transaction's that a retry cures? is the server
overloaded?), health signals (is this a replica set?) and converge (did the
server refuse a ``collMod``?). The predicates take any exception and read its
``code`` and error labels, so a wrapper that is not a driver error answers
False instead of raising.

It also says a driver error as a mongoshift error with a stable exit code:
connection-type failures (the network, server selection, a timeout) become
``connection_failed`` (5); refused credentials ``auth_failed`` (35); anything
else the server refuses ``server_error`` (1). Only the error's type, code and
code name are shown: a server message may quote a document value (a duplicate
key does), which must never reach the output.

This module imports only :mod:`mongoshift.errors` and the driver.
"""

from __future__ import annotations

import errno
import re
from typing import Any, Literal

from pymongo.errors import (
    ConnectionFailure,
    NetworkTimeout,
    OperationFailure,
    PyMongoError,
    ServerSelectionTimeoutError,
)

from ..errors import (
    AuthFailedError,
    ConnectionFailedError,
    MongoshiftError,
    ServerError,
)

# -- single codes ---------------------------------------------------------------

#: BadValue: what a find gets when its hint names no existing index (among other bad arguments).
BAD_VALUE = 2
#: Unauthorized: the user may not run the command (say ``replSetGetStatus`` without clusterMonitor).
UNAUTHORIZED = 13
#: IllegalOperation: among others, a transaction asked of a standalone server, or a mongos command.
ILLEGAL_OPERATION = 20
#: IndexNotFound: ``dropIndexes`` of an index that is already gone.
INDEX_NOT_FOUND = 27
#: ImmutableField: an update would change ``_id`` (or, before 4.2, a shard-key field).
IMMUTABLE_FIELD = 66
#: MaxTimeMSExpired: the operation ran past its own ``maxTimeMS``.
MAX_TIME_MS_EXPIRED = 50
#: WriteConcernFailed: the write happened but the secondaries did not confirm it in time.
WRITE_CONCERN_FAILED = 64
#: OperationNotSupportedInTransaction: the server refuses this operation inside a transaction.
NOT_IN_TRANSACTION = 263
#: TransactionExceededLifetimeLimitSeconds: the server aborted a transaction that stayed open too long.
TRANSACTION_TOO_OLD = 290

# -- sets -----------------------------------------------------------------------

#: AuthenticationFailed: the server answered but refused who we are.
AUTH_CODES = frozenset({18})
#: MechanismUnavailable, an auth failure only in the handshake: the same number means
#: TransactionTooLarge in a transaction's reply (the background engine halves its batch on it).
HANDSHAKE_AUTH_CODES = AUTH_CODES | {334}

#: The node we spoke to is unreachable, shutting down, or no longer primary, or no node fits the
#: read preference: HostUnreachable, HostNotFound, NetworkTimeout, ShutdownInProgress,
#: FailedToSatisfyReadPreference, PrimarySteppedDown, SocketException, NotWritablePrimary,
#: InterruptedAtShutdown, InterruptedDueToReplStateChange, NotPrimaryNoSecondaryOk,
#: NotPrimaryOrSecondary. The same request works later or on the next primary.
NODE_UNAVAILABLE_CODES = frozenset({6, 7, 89, 91, 133, 189, 9001, 10107, 11600, 11602, 13435, 13436})

#: The server ran out of time for the request: MaxTimeMSExpired, ExceededTimeLimit.
TIME_LIMIT_CODES = frozenset({MAX_TIME_MS_EXPIRED, 262})

#: The server is struggling rather than the data being wrong: an unreachable or failing-over node,
#: a time limit, secondaries that did not confirm in time. The adaptive throttle slows down on them.
OVERLOAD_CODES = NODE_UNAVAILABLE_CODES | TIME_LIMIT_CODES | {WRITE_CONCERN_FAILED}

#: A transaction lost a race, and running it again from the start cures it: LockTimeout,
#: WriteConflict, NoSuchTransaction (the server aborted it under us). Drivers usually add the
#: TransientTransactionError label too; servers that leave it out still send these codes.
TRANSIENT_TRANSACTION_CODES = frozenset({24, 112, 251})

#: TransactionTooLarge (257), and 334 outside the handshake: a transaction grew too big, not a document.
TRANSACTION_TOO_LARGE_CODES = frozenset({257, 334})

#: Errors that say nothing about the document a write was about, so they fail (and retry) the
#: batch: the server is overloaded, a transaction lost a race, stayed open too long or grew too
#: large, the operation was interrupted (Interrupted, 11601) or the user may not write (Unauthorized).
BATCH_ERRORS = (
    OVERLOAD_CODES | TRANSIENT_TRANSACTION_CODES | TRANSACTION_TOO_LARGE_CODES | {TRANSACTION_TOO_OLD, 11601, UNAUTHORIZED}
)

#: The document would pass 16 MiB: BSONObjectTooLarge, and 17419 (an update's result too large).
DOCUMENT_TOO_LARGE_CODES = frozenset({10334, 17419})

#: A transactional batch took too long or grew too big, so it is halved (alone, the document
#: fails): the time limits, TransactionExceededLifetimeLimitSeconds, TransactionTooLarge (257),
#: 334 (a too-large transaction outside the handshake) and a document past 16 MiB.
TRANSACTION_TOO_BIG_OR_SLOW_CODES = TIME_LIMIT_CODES | TRANSACTION_TOO_LARGE_CODES | {TRANSACTION_TOO_OLD} | DOCUMENT_TOO_LARGE_CODES

#: ``replSetGetStatus`` failing with these means "not a replica set": NoReplicationEnabled
#: (standalone), CommandNotFound (some servers), IllegalOperation (mongos).
NOT_A_REPLICA_SET_CODES = frozenset({76, 59, ILLEGAL_OPERATION})

#: Codes with which a server says "I do not do that" to a ``collMod`` (not "your data is wrong"):
#: FailedToParse, CommandNotFound, InvalidOptions, CommandNotSupported, NotImplemented, and
#: 40415 (an option the server does not know).
COLL_MOD_REFUSED_CODES = frozenset({9, 59, 72, 115, 238, 40415})

#: What a server without transactions (a standalone mongod) says when one starts, when it has no code to say it with.
_NO_TRANSACTIONS_MESSAGE = "Transaction numbers are only allowed"


def error_code(exc: BaseException) -> int | None:
    """The server's error code carried by ``exc``, or None (a non-driver exception has none)."""
    code = getattr(exc, "code", None)
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def has_label(exc: BaseException, label: str) -> bool:
    """Whether ``exc`` carries the driver error label ``label`` (non-driver exceptions carry none)."""
    check = getattr(exc, "has_error_label", None)
    return bool(check is not None and check(label))


# -- transactions ------------------------------------------------------------------


def transactions_unsupported(exc: BaseException) -> bool:
    """The server refused to start a transaction: a standalone mongod (IllegalOperation, or its message)."""
    return isinstance(exc, OperationFailure) and (exc.code == ILLEGAL_OPERATION or _NO_TRANSACTIONS_MESSAGE in str(exc))


def transient_transaction_error(exc: BaseException) -> bool:
    """A transaction error that a retry of the whole transaction can cure (label or code)."""
    return has_label(exc, "TransientTransactionError") or error_code(exc) in TRANSIENT_TRANSACTION_CODES


def unknown_commit_result(exc: BaseException) -> bool:
    """The commit may or may not have happened (a network error during it): commit again, which is safe."""
    return has_label(exc, "UnknownTransactionCommitResult")


def transaction_too_big_or_slow(exc: BaseException) -> bool:
    """A transaction failed for its size or its duration: a smaller batch may fit."""
    return error_code(exc) in TRANSACTION_TOO_BIG_OR_SLOW_CODES


# -- writes ------------------------------------------------------------------------


def overloaded(exc: BaseException) -> bool:
    """The server is struggling (a retryable label, or an overload code), not the data being wrong.

    A network failure that is not a timeout (refused, reset, no server selected) carries the same
    retryable label, but says the server is gone, not busy: a smaller batch would not help, and the
    runner's outage handling waits for it (see ``connection_lost``)."""
    if isinstance(exc, ConnectionFailure) and not isinstance(exc, NetworkTimeout):
        return False
    if has_label(exc, "TransientTransactionError") or has_label(exc, "RetryableWriteError"):
        return True
    return error_code(exc) in OVERLOAD_CODES


def document_write_error(code: Any) -> bool:
    """A write error (by its code) that fails only its document: anything but a batch error.

    A write error in a bulk's reply is about its own statement, and one document's contents
    can make the server refuse it with many codes (a revision that is not a number, a validator,
    a unique index, a path its shape refuses: TypeMismatch 14, DocumentValidationFailure 121,
    DuplicateKey 11000, PathNotViable 28, ConflictingUpdateOperators 40, a document grown past
    16 MiB, an expression of a pipeline that cannot evaluate...): a list of those would miss one
    and fail a whole migration on one document, so the errors that are not the document's are
    the ones listed. A pipeline update's errors are judged the same way."""
    return code not in BATCH_ERRORS


# -- commands ----------------------------------------------------------------------


def unauthorized(exc: BaseException) -> bool:
    """The user may not run the command."""
    return error_code(exc) == UNAUTHORIZED


def not_a_replica_set(exc: BaseException, message: str = "") -> bool:
    """``replSetGetStatus`` failed because there is no replica set (standalone, mongos); ``message`` is the server's."""
    return error_code(exc) in NOT_A_REPLICA_SET_CODES or "not running with --replSet" in message


def coll_mod_refused(exc: BaseException) -> bool:
    """The server does not do this ``collMod`` (an in-place index change): a rebuild may do it instead."""
    return isinstance(exc, OperationFailure) and exc.code in COLL_MOD_REFUSED_CODES


def index_not_found(exc: BaseException) -> bool:
    """The index to drop is not there (already dropped): nothing to do."""
    return isinstance(exc, OperationFailure) and exc.code == INDEX_NOT_FOUND


def max_time_expired(exc: BaseException) -> bool:
    """The operation ran past its own ``maxTimeMS``."""
    return isinstance(exc, OperationFailure) and exc.code == MAX_TIME_MS_EXPIRED


def bad_hint(exc: BaseException) -> bool:
    """A find's hint named no existing index (BadValue): the same find without the hint works."""
    return isinstance(exc, OperationFailure) and exc.code == BAD_VALUE


# -- credentials and the exit-code errors -----------------------------------------


def auth_failure(exc: BaseException, *, handshake: bool = False) -> bool:
    """The server refused the credentials (not: it could not be reached, or a command failed).

    mongod answers code 18; servers that leave the code out (the embedded one) still say
    "Authentication failed" in the reply to the handshake's SASL command."""
    if not isinstance(exc, OperationFailure):
        return False
    if exc.code in (HANDSHAKE_AUTH_CODES if handshake else AUTH_CODES):
        return True
    message = str((exc.details or {}).get("errmsg") or "")
    return exc.code is None and message.lower().startswith("authentication failed")


# -- why a server cannot be reached ------------------------------------------------

#: Why a connection failed: nothing listens on the port, the host name does not resolve, the TLS
#: handshake failed, no answer in time, or another network failure (a reset, not a MongoDB server).
ConnectionCause = Literal["refused", "dns", "tls", "timeout", "network"]

#: The driver keeps only the text of the socket error (no exception chain), so the causes are
#: read from it: the OS's words, as Linux, macOS and Windows say them.
_REFUSED = re.compile(rf"\[(?:Errno|WinError) (?:{errno.ECONNREFUSED}|10061)\]|connection refused|actively refused", re.IGNORECASE)
_DNS = re.compile(
    r"\[Errno -?(?:2|3|5|8|11001|11002)\] (?:Name|nodename|No address|Temporary failure in name)|getaddrinfo failed"
    r"|Name or service not known|nodename nor servname|Temporary failure in name resolution|No address associated with hostname"
    r"|DNS operation timed out|The DNS query name does not exist|None of DNS query names exist",
    re.IGNORECASE,
)
_TLS = re.compile(r"SSL handshake failed|\[SSL[:\]]|certificate verify failed", re.IGNORECASE)
_TIMED_OUT = re.compile(r"timed out", re.IGNORECASE)
_SSL_REASON = re.compile(r"\[SSL: ([A-Z0-9_]+)\]")


def connection_cause(exc: BaseException) -> ConnectionCause:
    """The cause a connection error names (the driver's message covers one host, or several)."""
    text = str(exc)
    if _TLS.search(text):
        return "tls"
    if _DNS.search(text):
        return "dns"
    if _REFUSED.search(text):
        return "refused"
    if _TIMED_OUT.search(text) or isinstance(exc, (NetworkTimeout, ServerSelectionTimeoutError)):
        return "timeout"
    return "network"


def connection_lost(exc: BaseException) -> bool:
    """The request failed for the connection, not for what it asked: a network error, no server
    selected in time, an operation cancelled when the driver marked the server unknown, or a node
    stepping down or shutting down. The same request can succeed later."""
    return isinstance(exc, ConnectionFailure) or (isinstance(exc, OperationFailure) and exc.code in NODE_UNAVAILABLE_CODES)


def says_cause(cause: ConnectionCause, text: str = "") -> str:
    """The cause in words a user can act on; ``text`` (the driver's) gives a TLS error its reason code only."""
    if cause == "refused":
        return "connection refused: nothing listens on that port (is the server running, and is the port right?)"
    if cause == "dns":
        return "the host name does not resolve (DNS): check its spelling, and that this machine can resolve it"
    if cause == "tls":
        reason = _SSL_REASON.search(text)
        said = f" ({reason.group(1)})" if reason else ""
        return f"the TLS handshake failed{said}: check tls in the URI, the CA file, and the server's certificate"
    if cause == "timeout":
        return "no answer in time: the host may be down, behind a firewall, or too busy"
    return "the network connection failed"


def connection_words(exc: BaseException) -> str:
    """A lost connection as ``Type: its cause in words``: the driver's own text can carry a whole
    topology description, which says nothing a user can act on."""
    return f"{type(exc).__name__}: {says_cause(connection_cause(exc), str(exc))}"


def from_pymongo(exc: PyMongoError) -> MongoshiftError:
    """``exc`` as the mongoshift error a user and a script can act on."""
    if isinstance(exc, ConnectionFailure):
        cause = connection_cause(exc)
        return ConnectionFailedError(
            f"lost the connection to MongoDB ({connection_words(exc)}); "
            "check that the server is reachable and try again",
            cause=cause,
        )
    if isinstance(exc, OperationFailure):
        name = (exc.details or {}).get("codeName") if isinstance(exc.details, dict) else None
        said = f"{name} (code {exc.code})" if name else f"code {exc.code}" if exc.code is not None else "no code given"
        if auth_failure(exc):
            return AuthFailedError(f"the server refused the credentials: {said}", code=exc.code)
        return ServerError(f"the server refused an operation: {type(exc).__name__}, {said}", code=exc.code, code_name=name)
    return ServerError(f"the MongoDB driver failed: {type(exc).__name__}")
