"""Every failure mongoshift reports, each with a stable exit code.

The codes are part of the public contract (CI scripts branch on them); the table
lives in docs/exit-codes.md and must change together with this module.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any


class ExitCode(IntEnum):
    OK = 0
    UNEXPECTED = 1
    PENDING = 2
    LOCK_HELD = 3
    CHECKSUM_MISMATCH = 4
    CONNECTION_FAILED = 5
    CONFIG_INVALID = 6
    EXECUTION_FAILED = 7
    FILE_NOT_FOUND = 8
    NOT_APPLIED = 9
    LOCK_LOST = 10
    ABORTED = 11
    HOOK_FAILED = 12
    IRREVERSIBLE = 13
    TIMEOUT = 14
    TRANSACTIONS_UNSUPPORTED = 15
    CONFIG_FILE_EXISTS = 16
    TARGET_NOT_EMPTY = 17
    MIGRATION_FILE_EXISTS = 18
    INVALID_NAME = 19
    INVALID_EXPORT = 20
    LOCK_RELEASE_FAILED = 21
    AUDIT_FAILED = 22
    OUT_OF_ORDER = 23
    REQUIREMENTS_PENDING = 24
    TASK_INVALID = 25
    CONVERGE_FAILED = 27
    COLLECTIONS_DRIFT = 28
    BACKGROUND_PENDING = 31
    BACKGROUND_FAILED = 32
    BACKGROUND_CONFLICT = 33
    SANDBOX_REFUSED = 34
    AUTH_FAILED = 35
    BACKGROUND_PAUSED = 36
    BACKGROUND_CANCELLED = 37
    BACKGROUND_FILE_CHANGED = 38
    COLLECTION_CLASH = 39
    AUDIT_WARNINGS = 40
    URI_UNAVAILABLE = 41
    CONFIRMATION_REQUIRED = 42
    DUPLICATE_VERSION = 43
    IO_FAILED = 44
    ADDRESS_IN_USE = 45
    TENANTS_INVALID = 46
    TENANTS_FAILED = 47
    MODELS_DRIFT = 48
    MODELS_INVALID = 49
    SQUASH_REFUSED = 50
    LINT_FINDINGS = 51
    DASHBOARD_REFUSED = 52
    THROTTLE_INVALID = 53
    TASK_REFUSED = 54
    SECOND_SIGNAL = 130


class MongoshiftError(Exception):
    """Base of every expected failure; ``details`` goes into ``--json`` output."""

    exit_code: ExitCode = ExitCode.UNEXPECTED
    kind: str = "error"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        #: Whose traceback was already logged, from the user's own frames on (a migration body's failure under
        #: ``-v``): the command line does not print its cause's traceback a second time, from mongoshift's frames.
        self.traceback_logged = False

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": int(self.exit_code), "kind": self.kind, "message": self.message}
        if self.details:
            body["details"] = self.details
        return body


class ServerError(MongoshiftError):
    """The server refused an operation for a reason that is not about the connection (code and name only)."""

    kind = "server_error"


class LockHeldError(MongoshiftError):
    """Another run holds the migration lock."""

    exit_code = ExitCode.LOCK_HELD
    kind = "lock_held"


class ChecksumMismatchError(MongoshiftError):
    """An applied file changed on disk and strict checksums are on."""

    exit_code = ExitCode.CHECKSUM_MISMATCH
    kind = "checksum_mismatch"


class ConnectionFailedError(MongoshiftError):
    """The server could not be reached within the connection timeout."""

    exit_code = ExitCode.CONNECTION_FAILED
    kind = "connection_failed"


class ConfigInvalidError(MongoshiftError):
    """A setting, flag or argument is invalid; the message names it and its source."""

    exit_code = ExitCode.CONFIG_INVALID
    kind = "config_invalid"


class ExecutionFailedError(MongoshiftError):
    """A migration raised; it is recorded as failed and the run stops there."""

    exit_code = ExitCode.EXECUTION_FAILED
    kind = "execution_failed"


class FileNotFoundMigrationError(MongoshiftError):
    """A named migration file (or the file of an applied record) does not exist."""

    exit_code = ExitCode.FILE_NOT_FOUND
    kind = "file_not_found"


class NotAppliedError(MongoshiftError):
    """The migration named for a rollback (or as a target) is not applied."""

    exit_code = ExitCode.NOT_APPLIED
    kind = "not_applied"


class LockLostError(MongoshiftError):
    """The run lost its lock (expired or cleared) and the policy is ``abort``."""

    exit_code = ExitCode.LOCK_LOST
    kind = "lock_lost"


class RunAbortedError(MongoshiftError):
    """The run was stopped (Ctrl-C or API) at a migration boundary; a migration running then that saw the stop is recorded failed."""

    exit_code = ExitCode.ABORTED
    kind = "aborted"


class HookFailedError(MongoshiftError):
    """A lifecycle hook raised."""

    exit_code = ExitCode.HOOK_FAILED
    kind = "hook_failed"


class IrreversibleMigrationError(MongoshiftError):
    """A rollback was asked of a migration without ``down``."""

    exit_code = ExitCode.IRREVERSIBLE
    kind = "irreversible"


class MigrationTimeoutError(MongoshiftError):
    """A migration ran past the configured timeout."""

    exit_code = ExitCode.TIMEOUT
    kind = "timeout"


class TransactionsUnsupportedError(MongoshiftError):
    """A transactional migration met a server without transactions (a standalone)."""

    exit_code = ExitCode.TRANSACTIONS_UNSUPPORTED
    kind = "transactions_unsupported"


class ConfigFileExistsError(MongoshiftError):
    """``init`` found a configuration already in place."""

    exit_code = ExitCode.CONFIG_FILE_EXISTS
    kind = "config_file_exists"


class TargetNotEmptyError(MongoshiftError):
    """``import`` found records in mongoshift's changelog that it did not import from this source (``--force``)."""

    exit_code = ExitCode.TARGET_NOT_EMPTY
    kind = "target_not_empty"


class MigrationFileExistsError(MongoshiftError):
    """``create`` would overwrite a file."""

    exit_code = ExitCode.MIGRATION_FILE_EXISTS
    kind = "migration_file_exists"


class InvalidNameError(MongoshiftError):
    """A migration name or file name does not follow the naming rule."""

    exit_code = ExitCode.INVALID_NAME
    kind = "invalid_name"


class InvalidExportError(MongoshiftError):
    """A migration file does not import, or lacks ``up``."""

    exit_code = ExitCode.INVALID_EXPORT
    kind = "invalid_export"


class LockReleaseFailedError(MongoshiftError):
    """The lock could not be released at the end of a run (the TTL will clear it)."""

    exit_code = ExitCode.LOCK_RELEASE_FAILED
    kind = "lock_release_failed"


class OutOfOrderError(MongoshiftError):
    """A pending file sorts before an applied one and the policy is ``error``."""

    exit_code = ExitCode.OUT_OF_ORDER
    kind = "out_of_order"


class BackgroundPendingError(MongoshiftError):
    """``background status --check``: a background migration has not completed yet."""

    exit_code = ExitCode.BACKGROUND_PENDING
    kind = "background_pending"


class BackgroundFailedError(MongoshiftError):
    """A background migration failed (or ``status --check`` found a failed one)."""

    exit_code = ExitCode.BACKGROUND_FAILED
    kind = "background_failed"


class BackgroundConflictError(MongoshiftError):
    """A control (pause, resume, cancel, retry) that does not fit the migration's status."""

    exit_code = ExitCode.BACKGROUND_CONFLICT
    kind = "background_conflict"


class SandboxRefusedError(MongoshiftError):
    """The validation sandbox refused an operation of the migration's code (reported even when the code caught it)."""

    exit_code = ExitCode.SANDBOX_REFUSED
    kind = "sandbox_refused"


class RequirementsPendingError(MongoshiftError):
    """``up`` reached a migration whose required background migrations are not done yet."""

    exit_code = ExitCode.REQUIREMENTS_PENDING
    kind = "requirements_pending"


class TaskInvalidError(MongoshiftError):
    """A job-system task (``mongoshift.celery``) carried a payload this version cannot run: it is refused, never retried."""

    exit_code = ExitCode.TASK_INVALID
    kind = "task_invalid"


class TaskRefusedError(MongoshiftError):
    """A job-system worker was sent a kind of task its registration does not allow (a rollback, a redo,
    one file out of the line's order: ``register(app, allow=...)``): it runs nothing, whoever queued it."""

    exit_code = ExitCode.TASK_REFUSED
    kind = "task_refused"


class ConvergeFailedError(MongoshiftError):
    """``converge`` refused its plan (a conflict) or an action failed; ``details`` holds the report."""

    exit_code = ExitCode.CONVERGE_FAILED
    kind = "converge_failed"


class CollectionsDriftError(MongoshiftError):
    """``converge --check``: the server differs from the declared collections."""

    exit_code = ExitCode.COLLECTIONS_DRIFT
    kind = "collections_drift"


class ModelsInvalidError(MongoshiftError):
    """The models cannot be read or turned into declarations or a migration: the message names the model and why."""

    exit_code = ExitCode.MODELS_INVALID
    kind = "models_invalid"


class UriUnavailableError(MongoshiftError):
    """``uri_command`` or ``uri_factory`` gave no connection string (failed, timed out, printed none)."""

    exit_code = ExitCode.URI_UNAVAILABLE
    kind = "uri_unavailable"


class AuthFailedError(MongoshiftError):
    """The server answered but refused the credentials (wrong user, password or mechanism)."""

    exit_code = ExitCode.AUTH_FAILED
    kind = "auth_failed"


class BackgroundPausedError(MongoshiftError):
    """``background run`` stopped because the migration was paused: not a success, not a failure."""

    exit_code = ExitCode.BACKGROUND_PAUSED
    kind = "background_paused"


class BackgroundCancelledError(MongoshiftError):
    """``background run`` stopped because the migration was cancelled."""

    exit_code = ExitCode.BACKGROUND_CANCELLED
    kind = "background_cancelled"


class BackgroundFileChangedError(MongoshiftError):
    """The file on disk differs from the registered version and did not come back within the wait bound."""

    exit_code = ExitCode.BACKGROUND_FILE_CHANGED
    kind = "background_file_changed"


class CollectionClashError(MongoshiftError):
    """A collection mongoshift would write its own records to holds other documents, or is a declared one."""

    exit_code = ExitCode.COLLECTION_CLASH
    kind = "collection_clash"


class ConfirmationRequiredError(MongoshiftError):
    """A command that asks first ran without a terminal and without ``--yes``: nothing is wrong with the configuration."""

    exit_code = ExitCode.CONFIRMATION_REQUIRED
    kind = "confirmation_required"


class DuplicateVersionError(MongoshiftError):
    """Two migration files share a timestamp or sequence number, so their order would be a guess; both are named."""

    exit_code = ExitCode.DUPLICATE_VERSION
    kind = "duplicate_version"


class IOFailedError(MongoshiftError):
    """A file or folder could not be read or written (read-only, no permission, disk full); the path and reason are named."""

    exit_code = ExitCode.IO_FAILED
    kind = "io_failed"

    @classmethod
    def from_os(cls, error: OSError, doing: str, path: object | None = None) -> IOFailedError:
        """``cannot <doing> <path>: <the system's reason>``; the path defaults to the one the error names."""
        where = path if path is not None else error.filename
        reason = error.strerror or type(error).__name__
        return cls(f"cannot {doing} {where}: {reason}", path=str(where), reason=reason)


class AddressInUseError(MongoshiftError):
    """A server (``embedded``) could not listen: the host and port are taken or cannot be bound."""

    exit_code = ExitCode.ADDRESS_IN_USE
    kind = "address_in_use"


class TenantsInvalidError(MongoshiftError):
    """A tenant selection or rollout option is refused before anything is written: an unknown name, a
    pattern or configuration matching nothing, a provider that fails or returns bad names, ``--parallel 0``, ..."""

    exit_code = ExitCode.TENANTS_INVALID
    kind = "tenants_invalid"


class TenantsFailedError(MongoshiftError):
    """A command across tenant databases did not reach every tenant: some failed, were locked, cancelled or not
    reached (each tenant's own code is in ``details.tenants``)."""

    exit_code = ExitCode.TENANTS_FAILED
    kind = "tenants_failed"


class SquashRefusedError(MongoshiftError):
    """A squash that cannot be made (a background migration or a ``requires`` target in the range, a file not
    applied), or a database in between a squash file's replaced files that the squash file cannot bring forward."""

    exit_code = ExitCode.SQUASH_REFUSED
    kind = "squash_refused"


class LintFindingsError(MongoshiftError):
    """``lint`` found risky operations that no suppression comment accounts for."""

    exit_code = ExitCode.LINT_FINDINGS
    kind = "lint_findings"


class DashboardRefusedError(MongoshiftError):
    """``mongoshift dashboard`` (or ``create_app``) refused to start: a non-loopback address without a token,
    a token too short, the ``dashboard`` extra not installed."""

    exit_code = ExitCode.DASHBOARD_REFUSED
    kind = "dashboard_refused"


class ThrottleInvalidError(MongoshiftError):
    """A throttle change asked for nothing, or for a batch size or pause outside the limits a migration file may declare."""

    exit_code = ExitCode.THROTTLE_INVALID
    kind = "throttle_invalid"
