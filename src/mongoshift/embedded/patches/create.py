"""The ``create`` command's options read as mongod reads them: a capped size or count given as a double (cq)."""

from __future__ import annotations

import math
from typing import Any

_WHOLE_NUMBER_OPTIONS = ("size", "max")


# (cq) A capped collection created through pymongo was refused: Database.create_collection(
# "log", capped=True, size=4096) sends the size as a double (pymongo converts it with float()),
# and mongoeco's AsyncDatabaseAdminService._validate_create_collection_options takes only a
# Python int for "size" and "max" ("size must be a positive integer", no code). mongod reads
# both as a number of any type (CollectionOptions::parse, safeNumberLong: a double is cut to
# its whole part) and lists them as whole numbers. The fix turns a finite double into that
# whole number in the options the collection keeps, before mongoeco's own checks (which
# still refuse 0, a negative number, a text); any other value is left to them.
def patch_capped_numbers() -> None:
    from mongoeco.api._async.database_admin import AsyncDatabaseAdminService

    original = AsyncDatabaseAdminService._validate_create_collection_options

    def validate_create_collection_options(options: dict[str, Any]) -> None:
        for name in _WHOLE_NUMBER_OPTIONS:
            value = options.get(name)
            if isinstance(value, float) and math.isfinite(value):
                options[name] = int(value)
        original(options)

    AsyncDatabaseAdminService._validate_create_collection_options = staticmethod(validate_create_collection_options)
