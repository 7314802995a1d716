"""The one module that knows MongoDB error codes: each predicate on errors built as the driver builds them."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo.errors import AutoReconnect, BulkWriteError, NetworkTimeout, OperationFailure, ServerSelectionTimeoutError

from mongoshift.project import server_errors as se


def failure(code: int | None, *, labels: list[str] | None = None, message: str = "failed") -> OperationFailure:
    details: dict[str, Any] = {"errmsg": message, "code": code}
    if labels:
        details["errorLabels"] = labels
    return OperationFailure(message, code=code, details=details)


def bulk_error(*codes: int, labels: list[str] | None = None) -> BulkWriteError:
    details: dict[str, Any] = {
        "writeErrors": [{"index": i, "code": code, "errmsg": "x"} for i, code in enumerate(codes)],
        "nMatched": 0,
    }
    if labels:
        details["errorLabels"] = labels
    return BulkWriteError(details)


class NotADriverError(Exception):
    code = 112  # a code of its own, but no labels: read the same way


def test_error_code_reads_only_integer_codes() -> None:
    assert se.error_code(failure(112)) == 112
    assert se.error_code(failure(None)) is None
    assert se.error_code(ValueError("no code")) is None
    assert se.error_code(SystemExit(True)) is None  # a bool is not a server code


def test_labels_are_read_from_the_reply() -> None:
    assert se.has_label(failure(1, labels=["TransientTransactionError"]), "TransientTransactionError")
    assert not se.has_label(failure(1), "TransientTransactionError")
    assert not se.has_label(ValueError(), "TransientTransactionError")


@pytest.mark.parametrize("code", [24, 112, 251])
def test_transient_transaction_codes_without_the_label(code: int) -> None:
    assert se.transient_transaction_error(failure(code))


def test_transient_transaction_label_with_any_code() -> None:
    assert se.transient_transaction_error(failure(9001, labels=["TransientTransactionError"]))
    assert se.transient_transaction_error(NotADriverError())
    assert not se.transient_transaction_error(failure(11000))
    assert not se.transient_transaction_error(failure(50))
    assert not se.transient_transaction_error(ValueError("boom"))


def test_unknown_commit_result_is_the_label_only() -> None:
    assert se.unknown_commit_result(failure(91, labels=["UnknownTransactionCommitResult"]))
    assert not se.unknown_commit_result(failure(91))
    assert not se.unknown_commit_result(failure(91, labels=["TransientTransactionError"]))


@pytest.mark.parametrize("code", [50, 262, 290, 257, 334, 10334, 17419])
def test_transaction_too_big_or_slow(code: int) -> None:
    assert se.transaction_too_big_or_slow(failure(code))


@pytest.mark.parametrize("code", [112, 251, 11000, 18, None])
def test_not_too_big_or_slow(code: int | None) -> None:
    assert not se.transaction_too_big_or_slow(failure(code))


def test_transactions_unsupported_by_code_or_by_message() -> None:
    assert se.transactions_unsupported(failure(20, message="Transaction numbers are only allowed on a replica set member or mongos"))
    assert se.transactions_unsupported(failure(20))
    assert se.transactions_unsupported(failure(None, message="Transaction numbers are only allowed on a replica set member or mongos"))
    assert not se.transactions_unsupported(failure(112))
    assert not se.transactions_unsupported(ValueError("Transaction numbers are only allowed"))  # only a server reply says it


@pytest.mark.parametrize("code", [6, 7, 50, 64, 89, 91, 133, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436])
def test_overloaded_codes(code: int) -> None:
    assert se.overloaded(failure(code))


@pytest.mark.parametrize("label", ["TransientTransactionError", "RetryableWriteError"])
def test_overloaded_labels(label: str) -> None:
    assert se.overloaded(failure(11000, labels=[label]))
    assert se.overloaded(bulk_error(11000, labels=[label]))


def test_a_gone_server_is_not_an_overloaded_one() -> None:
    """Found in a user trial: a batch whose server was killed shrank, logged as "the server reported it is
    overloaded", since the driver labels a refused or reset connection RetryableWriteError too."""
    for lost in (AutoReconnect("connection refused"), ServerSelectionTimeoutError("no server")):
        lost._add_error_label("RetryableWriteError")
        assert not se.overloaded(lost)
    late = NetworkTimeout("timed out")
    late._add_error_label("RetryableWriteError")
    assert se.overloaded(late)  # a busy server's late answer is one


@pytest.mark.parametrize("code", [11000, 121, 2, 20, None])
def test_not_overloaded(code: int | None) -> None:
    assert not se.overloaded(failure(code))
    assert not se.overloaded(ValueError("boom"))


#: Write errors a document's own contents can cause, for the guarded updates and the pipeline ones:
#: DuplicateKey, DocumentValidationFailure, ImmutableField, InvalidOptions, KeyTooLong, too large,
#: TypeMismatch ($inc on a revision that is not a number), PathNotViable, ConflictingUpdateOperators,
#: BadValue, an expression that cannot evaluate ($add of a string), and a write error without a code.
DOCUMENT_CODES = [11000, 121, 66, 72, 17280, 17419, 10334, 14, 28, 40, 2, 16554, None]


@pytest.mark.parametrize("code", DOCUMENT_CODES)
def test_document_write_errors(code: int | None) -> None:
    assert se.document_write_error(code)


@pytest.mark.parametrize("code", [112, 50, 91, 10107, 257, 334, 11601, 13])
def test_other_write_errors_fail_the_batch(code: int) -> None:
    assert not se.document_write_error(code)


@pytest.mark.parametrize("code", sorted(se.BATCH_ERRORS))
def test_batch_errors_are_not_the_documents(code: int) -> None:
    assert not se.document_write_error(code)


def test_a_bulk_write_error_is_judged_by_each_write_error() -> None:
    exc = bulk_error(11000, 112)
    judged = [se.document_write_error(e["code"]) for e in exc.details["writeErrors"]]
    assert judged == [True, False]


def test_the_sets_agree_with_each_other() -> None:
    """What fails a batch never fails only a document; overload and transient codes fail the batch."""
    assert not se.BATCH_ERRORS & {code for code in DOCUMENT_CODES if code is not None}
    assert se.OVERLOAD_CODES <= se.BATCH_ERRORS
    assert se.TRANSIENT_TRANSACTION_CODES <= se.BATCH_ERRORS
    assert se.TRANSACTION_TOO_LARGE_CODES <= se.BATCH_ERRORS & se.TRANSACTION_TOO_BIG_OR_SLOW_CODES
    assert se.DOCUMENT_TOO_LARGE_CODES <= se.TRANSACTION_TOO_BIG_OR_SLOW_CODES - se.BATCH_ERRORS


def test_unauthorized() -> None:
    assert se.unauthorized(failure(13))
    assert not se.unauthorized(failure(18))


@pytest.mark.parametrize("code", [76, 59, 20])
def test_not_a_replica_set_by_code(code: int) -> None:
    assert se.not_a_replica_set(failure(code))


def test_not_a_replica_set_by_message() -> None:
    assert se.not_a_replica_set(failure(None), "not running with --replSet")
    assert not se.not_a_replica_set(failure(13), "not authorized")
    assert not se.not_a_replica_set(ValueError("x"))


@pytest.mark.parametrize("code", [9, 59, 72, 115, 238, 40415])
def test_coll_mod_refused(code: int) -> None:
    assert se.coll_mod_refused(failure(code))


def test_coll_mod_not_refused() -> None:
    assert not se.coll_mod_refused(failure(11000))  # the data is wrong, a rebuild would not help
    assert not se.coll_mod_refused(NotADriverError())


def test_index_not_found() -> None:
    assert se.index_not_found(failure(27))
    assert not se.index_not_found(failure(26))


def test_max_time_expired() -> None:
    assert se.max_time_expired(failure(50))
    assert not se.max_time_expired(failure(262))


def test_bad_hint() -> None:
    assert se.bad_hint(failure(2, message="hint provided does not correspond to an existing index"))
    assert not se.bad_hint(failure(50))


def test_auth_failure_by_code_and_by_message() -> None:
    assert se.auth_failure(failure(18))
    assert se.auth_failure(failure(None, message="Authentication failed."))
    assert not se.auth_failure(failure(13))
    assert not se.auth_failure(AutoReconnect("gone"))


def test_a_lost_connection_is_said_by_its_cause_not_the_drivers_topology_dump() -> None:
    from pymongo.errors import ServerSelectionTimeoutError

    from mongoshift.project.server_errors import connection_words

    driver = (
        "operation cancelled, Timeout: 30.0s, Topology Description: <TopologyDescription id: 1f, topology_type: Single, "
        "servers: [<ServerDescription ('127.0.0.1', 27017) server_type: Unknown, rtt: None, error=_OperationCancelled('operation cancelled')>]>"
    )
    said = connection_words(ServerSelectionTimeoutError(driver))
    assert said.startswith("ServerSelectionTimeoutError: ")
    assert "TopologyDescription" not in said and "127.0.0.1" not in said
