"""The typed spec a background migration file declares: ``background = Background(...)``.

Every value is checked when the file is imported, so a bad spec fails
registration with a message naming the key, before anything is written.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

from bson import json_util
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
MAX_CHECKPOINT_BYTES = 64 * 1024


class Partitions(BaseModel):
    """How a pass is cut into ``_id`` ranges that lanes claim."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    over_partition: int = Field(default=4, ge=1, le=64)
    max_partitions: int = Field(default=256, ge=1, le=4096)
    min_partition_docs: int | None = Field(default=None, ge=1)
    sample_size: int | None = Field(default=None, ge=1, le=100_000)


class Adaptive(BaseModel):
    """Additive increase / multiplicative decrease of the batch size on write latency."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target_latency_ms: int = Field(default=500, ge=1, le=600_000)
    min_batch_size: int = Field(default=10, ge=1, le=10_000)
    max_batch_size: int | None = Field(default=None, ge=1, le=10_000)
    max_pause_ms: int = Field(default=30_000, ge=0, le=3_600_000)


def _mentions(value: Any, field: str) -> bool:
    if isinstance(value, dict):
        return any(k == field or k.startswith(field + ".") or _mentions(v, field) for k, v in value.items())
    if isinstance(value, list):
        return any(_mentions(v, field) for v in value)
    return False


#: Update-pipeline stages a ``pipeline`` may use: they change fields and keep the rest of the
#: document, so the engine's own last stage can still stamp the version and the revision.
PIPELINE_STAGES = frozenset({"$set", "$addFields", "$unset"})


def _check_pipeline(name: str, stages: list[dict[str, Any]], reserved: tuple[str, ...]) -> None:
    """Refuse what the server would take but the engine cannot guard: other stages, or stages
    that write the fields the engine owns."""
    if not stages:
        raise ValueError(f"{name} is empty")
    for i, stage in enumerate(stages):
        if not isinstance(stage, dict) or len(stage) != 1:
            raise ValueError(f"{name}[{i}] must be one stage: a dict with one key such as $set")
        (op, body), = stage.items()
        if op not in PIPELINE_STAGES:
            raise ValueError(f"{name}[{i}]: {op} is not allowed; use {', '.join(sorted(PIPELINE_STAGES))}")
        if op == "$unset":
            names = [body] if isinstance(body, str) else body
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise ValueError(f"{name}[{i}]: $unset takes a field name or a list of them")
        elif isinstance(body, dict):
            names = list(body)
        else:
            raise ValueError(f"{name}[{i}]: {op} takes a document of fields")
        for field in names:
            if field.split(".")[0] in reserved:
                raise ValueError(f"{name}[{i}] may not write {field}: the engine sets the version and the revision itself")


class Transaction(BaseModel):
    """Each batch (or step) in one snapshot transaction with its checkpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_ms: int = Field(default=10_000, ge=100, le=50_000)
    max_retries: int = Field(default=5, ge=0, le=20)


class Background(BaseModel):
    """A background migration: rewrite ``collection`` from one shape version to another.

    Give exactly one of ``migrate(doc, ctx)`` (returns the whole new document),
    ``migrate_batch(docs, ctx)`` (one result per document, in order; an
    ``Exception`` element fails that document), ``pipeline=[...]`` (an update
    pipeline the server runs on each document: nothing is read into Python but
    the ``_id``) or ``step(ctx)`` (for work that is not one document in, one
    out). Functions may be sync or async; sync transforms run inline on the
    event loop, so keep them quick.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    collection: str = Field(min_length=1, max_length=120)
    from_version: int = Field(ge=0)
    to_version: int = Field(ge=0)
    filter: dict[str, Any] = Field(default_factory=dict)
    migrate: Callable[..., Any] | None = None
    migrate_batch: Callable[..., Any] | None = None
    revert: Callable[..., Any] | None = None
    revert_batch: Callable[..., Any] | None = None
    step: Callable[..., Any] | None = None
    revert_step: Callable[..., Any] | None = None
    pipeline: list[dict[str, Any]] | None = None
    revert_pipeline: list[dict[str, Any]] | None = None
    batch_size: int = Field(default=500, ge=1, le=10_000)
    pause_ms: int = Field(default=100, ge=0, le=3_600_000)
    slice_ms: int = Field(default=30_000, ge=1_000, le=3_600_000)
    write_concern: dict[str, Any] = Field(default_factory=lambda: {"w": "majority"})
    max_document_errors: int = Field(default=0, ge=0, le=1_000)
    max_passes: int = Field(default=10, ge=1, le=1_000)
    max_conflict_retries: int = Field(default=3, ge=0, le=100)
    max_slice_failures: int = Field(default=3, ge=1, le=100)
    max_parallel: int = Field(default=1, ge=1, le=64)
    partitions: Partitions = Field(default_factory=Partitions)
    adaptive: Adaptive | Literal[False] = Field(default_factory=Adaptive)
    throttle: Callable[..., Any] | None = None
    version_field: str = "__v"
    revision_field: str = "__rev"
    occ: Literal["revision", "version-only"] = "revision"
    description: str | None = Field(default=None, max_length=512)
    transaction: Transaction | None = None
    max_replication_lag_ms: int | Literal[False] = Field(default=10_000)
    health: list[Callable[..., Any]] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _transaction_defaults(cls, data: Any) -> Any:
        """``transaction=True`` means the defaults; a transactional batch defaults to 100 documents."""
        if isinstance(data, dict):
            value = data.get("transaction")
            if value is True:
                data = {**data, "transaction": Transaction()}
            elif value is False:
                data = {**data, "transaction": None}
            if data.get("transaction") is not None and "batch_size" not in data:
                data = {**data, "batch_size": 100}
        return data

    @field_validator("max_replication_lag_ms")
    @classmethod
    def _lag(cls, value: int | bool) -> int | bool:
        if value is True or (value is not False and not 0 <= value <= 3_600_000):
            raise ValueError("must be False (never wait) or a number of ms from 0 to 3,600,000")
        return value

    @field_validator("collection")
    @classmethod
    def _collection_name(cls, value: str) -> str:
        if value.startswith("system.") or value.startswith("_mongoshift") or "$" in value or "\x00" in value:
            raise ValueError(f"{value!r} is not a collection a background migration may rewrite")
        if value.upper() == "TODO":
            raise ValueError("name the collection to migrate (the skeleton says TODO)")
        return value

    @field_validator("version_field", "revision_field")
    @classmethod
    def _field_name(cls, value: str) -> str:
        if not FIELD_NAME.match(value) or value == "_id":
            raise ValueError(f"{value!r} must be a top-level field name (letters, digits, _), not _id")
        return value

    @field_validator("write_concern")
    @classmethod
    def _write_concern(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = set(value) - {"w", "j", "wtimeout"}
        if unknown:
            raise ValueError(f"unknown write concern option(s): {', '.join(sorted(unknown))}")
        if value.get("w", 1) == 0:
            raise ValueError("w: 0 is refused: unacknowledged writes cannot be checked or counted")
        return value

    @field_validator("adaptive", mode="before")
    @classmethod
    def _adaptive(cls, value: Any) -> Any:
        if value is True or value is None:
            return Adaptive()
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Background:
        if self.to_version == self.from_version:
            raise ValueError("from_version and to_version must differ")
        if self.to_version < self.from_version:
            raise ValueError("to_version must be greater than from_version (revert is declared with revert=...)")
        forms = [n for n in ("migrate", "migrate_batch", "pipeline", "step") if getattr(self, n) is not None]
        if len(forms) != 1:
            raise ValueError(f"give exactly one of migrate, migrate_batch, pipeline or step (got {', '.join(forms) or 'none'})")
        if self.step is not None and (self.revert or self.revert_batch or self.revert_pipeline):
            raise ValueError("a step migration reverts with revert_step")
        if self.step is None and self.revert_step is not None:
            raise ValueError("revert_step goes with step")
        reverts = [n for n in ("revert", "revert_batch", "revert_pipeline") if getattr(self, n) is not None]
        if len(reverts) > 1:
            raise ValueError(f"give at most one of revert, revert_batch or revert_pipeline (got {', '.join(reverts)})")
        if self.version_field == self.revision_field:
            raise ValueError("version_field and revision_field must differ")
        for name in ("pipeline", "revert_pipeline"):
            stages = getattr(self, name)
            if stages is not None:
                _check_pipeline(name, stages, (self.version_field, self.revision_field, "_id"))
        for name in (self.version_field, self.revision_field):
            if _mentions(self.filter, name):
                raise ValueError(f"filter may not name {name}: the engine matches the version itself")
        if self.step is not None and self.max_parallel != 1:
            raise ValueError("a step migration runs as one partition: max_parallel must be 1")
        if isinstance(self.adaptive, Adaptive):
            if self.adaptive.max_batch_size is not None and self.adaptive.max_batch_size < self.adaptive.min_batch_size:
                raise ValueError("adaptive.max_batch_size is below adaptive.min_batch_size")
        return self

    # -- derived values -------------------------------------------------------

    @property
    def mode(self) -> Literal["documents", "step"]:
        return "step" if self.step is not None else "documents"

    @property
    def reversible(self) -> bool:
        return any(f is not None for f in (self.revert, self.revert_batch, self.revert_step, self.revert_pipeline))

    @property
    def min_partition_docs(self) -> int:
        return self.partitions.min_partition_docs or 4 * self.batch_size

    @property
    def partition_target(self) -> int:
        if self.max_parallel == 1:
            return 1
        return min(self.partitions.over_partition * self.max_parallel, self.partitions.max_partitions)

    @property
    def sample_size(self) -> int:
        return self.partitions.sample_size or min(10_000, 100 * self.partition_target)

    def settings(self) -> dict[str, Any]:
        """The plain values stored with the registration (functions are not)."""
        data = self.model_dump(
            exclude={"migrate", "migrate_batch", "revert", "revert_batch", "step", "revert_step", "throttle", "health"}
        )
        for name in ("pipeline", "revert_pipeline"):
            if data.get(name) is not None:  # stored as text: stage names start with $, which a stored field name should not
                data[name] = json_util.dumps(data[name], json_options=json_util.CANONICAL_JSON_OPTIONS)
        data["mode"] = self.mode
        data["reversible"] = self.reversible
        return data
