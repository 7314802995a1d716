"""A background spec aligned with its collection's declaration (``versioning`` in converge).

When the collection declares versioning, the declaration is the one place the
field names live: the engine takes ``version_field`` and ``revision_field``
from it (and so guards with the declared fields and reads through the declared
``{field: 1, _id: 1}`` index), and refuses a migration to a version the
declaration does not allow yet. A spec that names other fields is an error, not
a silent override: one of the two is wrong.
"""

from __future__ import annotations

from ...errors import ConfigInvalidError
from ...project.declarations import Declarations
from ...project.loader import MigrationFile
from ...schema.background import Background
from ...schema.collections import Versioning


def align(spec: Background, versioning: Versioning | None, *, file: str, collection: str) -> Background:
    """``spec`` with the declared field names; raises when it contradicts the declaration."""
    if versioning is None:
        return spec
    declared = {"version_field": versioning.field, "revision_field": versioning.revision_field}
    if spec.occ == "version-only":  # its guard has no revision: the spec refuses a revision field
        del declared["revision_field"]
    current = versioning.current
    for key, value in declared.items():
        if key in spec.model_fields_set and getattr(spec, key) != value:
            raise ConfigInvalidError(
                f"{file}: {key} is {getattr(spec, key)!r} but collection {collection!r} declares {value!r}; "
                f"drop {key} from the file or change the declaration",
                file=file,
            )
    if spec.to_version > current:
        raise ConfigInvalidError(
            f"{file}: to_version {spec.to_version} is above the current version {current} declared for "
            f"{collection!r}: raise current first (and converge), so that the validator accepts the new shape",
            file=file,
        )
    if spec.mode == "step" or all(getattr(spec, key) == value for key, value in declared.items()):
        return spec  # a step does its own reads and writes: it names no version field
    values = {key: getattr(spec, key) for key in spec.model_fields_set}
    return Background(**{**values, **declared})


def align_file(item: MigrationFile, declarations: Declarations) -> None:
    """Align a loaded background file with the project's declarations (a no-op without one)."""
    spec = item.background
    if spec is None:
        return
    declaration = declarations.get(spec.collection)
    versioning = declaration.versioning if declaration is not None else None
    item.aligned = align(spec, versioning, file=item.name, collection=spec.collection)
