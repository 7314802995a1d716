"""Document validity fixes: an ``_id`` with ``$``-prefixed fields is refused (aa)."""

from __future__ import annotations

from typing import Any

from ._support import replace_everywhere

DOLLAR_PREFIXED_FIELD_NAME = 52


def _dollar_field(value: object) -> str | None:
    """The first ``$``-prefixed field of an ``_id`` document, None if none (a DBRef is allowed)."""
    if not isinstance(value, dict):
        return None
    keys = [key for key in value if isinstance(key, str)]
    if keys[:2] == ["$ref", "$id"]:
        return None
    return next((key for key in keys if key.startswith("$")), None)


# (aa) An _id with $-prefixed fields is stored: {_id: {$a: 1}} is accepted, where
# mongod refuses it ("_id fields may not contain '$'-prefixed fields", 52
# DollarPrefixedFieldName), also since 5.0 allows such fields elsewhere in a
# document. core/identity.assert_valid_root_document_id, which every insert,
# replacement and upsert runs on the stored _id (it refuses arrays and regexes,
# code 53), now refuses those too, as a write error of that statement.
def patch_dollar_prefixed_ids() -> None:
    from mongoeco.core import identity
    from mongoeco.errors import WriteError

    original = identity.assert_valid_root_document_id

    def assert_valid_root_document_id(value: Any) -> None:
        original(value)
        field = _dollar_field(value)
        if field is not None:
            raise WriteError(
                f"_id fields may not contain '$'-prefixed fields: {field} is not valid for storage.",
                code=DOLLAR_PREFIXED_FIELD_NAME,
            )

    replace_everywhere(identity, "assert_valid_root_document_id", assert_valid_root_document_id)
