"""Registering a plain Pydantic model to a collection (Beanie and MongoEngine name their own).

The decorator only stores a :class:`Registration` on the class: nothing is imported and
nothing is connected, so application code pays nothing for it. ``collections generate``
finds the class when it walks the models package.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import ModelsInvalidError

ATTRIBUTE = "__mongoshift_collection__"

T = TypeVar("T", bound=type)


@dataclass(frozen=True)
class Registration:
    """Where a plain model is stored and which indexes it wants (pymongo ``IndexModel`` or declaration dicts)."""

    name: str
    indexes: tuple[Any, ...] = ()


def collection(name: str, *, indexes: Sequence[Any] = ()) -> Callable[[T], T]:
    """Class decorator: the documents of collection ``name`` have this Pydantic model's shape.

    ``indexes``: what a declaration takes (``{"keys": {"email": 1}, "unique": True}`` or a
    pymongo ``IndexModel``); they are checked when the declaration is generated.
    """
    if isinstance(name, type):  # "@collection" without its call: the class came as the name
        raise ModelsInvalidError(f"@collection on {name.__name__} needs the collection's name: @collection(\"events\"), not @collection")
    if not isinstance(name, str) or not name:
        raise ModelsInvalidError(f"collection(name): name must be a non-empty string, not {type(name).__name__}")
    if isinstance(indexes, (str, bytes)) or not isinstance(indexes, Sequence):
        raise ModelsInvalidError(f"collection({name!r}): indexes must be a list of indexes, not {type(indexes).__name__}")
    registration = Registration(name, tuple(indexes))

    def register(cls: T) -> T:
        setattr(cls, ATTRIBUTE, registration)
        return cls

    return register


def registration_of(cls: type) -> Registration | None:
    """The class's own registration (a subclass of a registered model is not registered by inheritance)."""
    value = cls.__dict__.get(ATTRIBUTE)
    return value if isinstance(value, Registration) else None
