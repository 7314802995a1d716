"""A driver error, said as a mongoshift error with a stable exit code.

Connection-type failures (the network, server selection, a timeout) become
``connection_failed`` (5); refused credentials ``auth_failed`` (35); anything
else the server refuses ``server_error`` (1). Only the error's type, code and
code name are shown: a server message may quote a document value (a duplicate
key does), which must never reach the output.
"""

from __future__ import annotations

from pymongo.errors import ConnectionFailure, OperationFailure, PyMongoError

from ..errors import AuthFailedError, ConnectionFailedError, MongoshiftError, ServerError

#: AuthenticationFailed: the server answered but refused who we are.
AUTH_CODES = frozenset({18})
#: MechanismUnavailable, an auth failure only in the handshake: the same number means
#: TransactionTooLarge in a transaction's reply (the background engine halves its batch on it).
HANDSHAKE_AUTH_CODES = AUTH_CODES | {334}


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


def from_pymongo(exc: PyMongoError) -> MongoshiftError:
    """``exc`` as the mongoshift error a user and a script can act on."""
    if isinstance(exc, ConnectionFailure):
        return ConnectionFailedError(
            f"lost the connection to MongoDB ({type(exc).__name__}); check that the server is reachable and try again"
        )
    if isinstance(exc, OperationFailure):
        name = (exc.details or {}).get("codeName") if isinstance(exc.details, dict) else None
        said = f"{name} (code {exc.code})" if name else f"code {exc.code}" if exc.code is not None else "no code given"
        if auth_failure(exc):
            return AuthFailedError(f"the server refused the credentials: {said}", code=exc.code)
        return ServerError(f"the server refused an operation: {type(exc).__name__}, {said}", code=exc.code, code_name=name)
    return ServerError(f"the MongoDB driver failed: {type(exc).__name__}")
