"""What the fixes share: the MongoDB error codes they answer with and small helpers."""

from __future__ import annotations

from typing import Any

# MongoDB error codes the fixes produce.
WRITE_CONFLICT = 112
NO_SUCH_TRANSACTION = 251
COMMAND_NOT_FOUND = 59
NAMESPACE_EXISTS = 48
NAMESPACE_NOT_FOUND = 26
BAD_VALUE = 2
CANNOT_CREATE_INDEX = 67
TRANSIENT = "TransientTransactionError"


def id_key(value: Any) -> bytes:
    from bson import encode

    return encode({"k": value})


def failure(message: str, code: int, code_name: str, labels: tuple[str, ...] = ()) -> Exception:
    from mongoeco.errors import OperationFailure

    return OperationFailure(message, code=code, details={"codeName": code_name}, error_labels=labels)


def as_int(value: object) -> int | None:
    # Wire Int64 values arrive as mongoeco BsonInt64 (a wrapper with .value).
    value = getattr(value, "value", value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def replace_everywhere(module: Any, name: str, replacement: Any) -> None:
    """Replace function ``name`` of ``module`` and every binding of it in mongoeco's modules.

    mongoeco imports some helpers by name (``from ... import f``) into many modules; each
    holds its own reference, so replacing the defining module's attribute alone would
    miss them. Modules imported later take the module's (replaced) attribute."""
    import sys

    original = getattr(module, name)
    for loaded in list(sys.modules.values()):
        if getattr(loaded, "__name__", "").startswith("mongoeco") and getattr(loaded, name, None) is original:
            setattr(loaded, name, replacement)
