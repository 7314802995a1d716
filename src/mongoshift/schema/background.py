"""The typed spec a background migration file declares: ``background = Background(...)``.

Every value is checked when the file is imported, so a bad spec fails
registration with a message naming the key, before anything is written. The
check is complete and strict: numbers must be ``int`` (``True`` or ``"100"`` is
not one), everything stored must be BSON, and every problem is reported at once
(the value-by-value ones and the rules between values), never a value itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

from bson import json_util
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from .collections import bson_problem

FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
MAX_CHECKPOINT_BYTES = 64 * 1024
#: The largest integer BSON stores (a 64-bit long): a version or a count past it could be checked here,
#: then fail with an OverflowError the first time the state or a filter is written.
MAX_BSON_INT = 2**63 - 1


class Partitions(BaseModel):
    """How a pass is cut into ``_id`` ranges that lanes claim."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    over_partition: StrictInt = Field(default=4, ge=1, le=64)
    max_partitions: StrictInt = Field(default=256, ge=1, le=4096)
    min_partition_docs: StrictInt | None = Field(default=None, ge=1, le=MAX_BSON_INT)
    sample_size: StrictInt | None = Field(default=None, ge=1, le=100_000)


#: Without ``adaptive.max_batch_size``, a lane may grow its batches to this many times ``batch_size``, up to MAX_DEFAULT.
MAX_FACTOR = 10
MAX_DEFAULT = 10_000


class Adaptive(BaseModel):
    """The batch size a lane settles on by itself: a target share of its time working, each
    batch within ``target_latency_ms``, between ``min_batch_size`` and ``max_batch_size``
    (default: ten times ``batch_size``, at most 10,000). See :mod:`mongoshift.background.lanes.throttle`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The share of a lane's cycle (the waits before a batch and the batch) spent reading and writing, in percent.
    target_work_percent: StrictInt = Field(default=90, ge=10, le=95)
    target_latency_ms: StrictInt = Field(default=500, ge=1, le=600_000)
    min_batch_size: StrictInt = Field(default=10, ge=1, le=10_000)
    max_batch_size: StrictInt | None = Field(default=None, ge=1, le=10_000)
    max_pause_ms: StrictInt = Field(default=30_000, ge=0, le=3_600_000)

    def bounds(self, batch_size: int) -> tuple[int, int]:
        """``(min, max)`` batch size for a spec whose ``batch_size`` (the start) is given: without
        ``max_batch_size``, :data:`MAX_FACTOR` times ``batch_size``, at most :data:`MAX_DEFAULT`;
        a ``batch_size`` under ``min_batch_size`` is the lower bound, so the start is always as given
        unless ``max_batch_size`` is below it."""
        high = self.max_batch_size or max(batch_size, min(MAX_DEFAULT, MAX_FACTOR * batch_size))
        return min(self.min_batch_size, batch_size, high), high


def _names_field(query: Any, field: str) -> bool:
    """Whether a query filter reads the document's top-level ``field``: a key naming it (or a path under
    it) in the filter or its ``$and``/``$or``/``$nor`` branches, a field path (``"$field"``) anywhere in
    ``$expr``, a ``$jsonSchema`` property. The names inside an operator (``$elemMatch``'s) are an array
    element's fields, not the document's."""
    if not isinstance(query, dict):
        return False
    for key, value in query.items():
        if key in ("$and", "$or", "$nor"):
            if isinstance(value, list) and any(_names_field(branch, field) for branch in value):
                return True
        elif key == "$expr":
            if _expr_names(value, field):
                return True
        elif key == "$jsonSchema":
            if isinstance(value, dict) and (field in (value.get("properties") or {}) or field in (value.get("required") or [])):
                return True
        elif isinstance(key, str) and (key == field or key.startswith(field + ".")):
            return True
    return False


def _expr_names(expression: Any, field: str) -> bool:
    """Whether an aggregation expression reads ``field`` of the document (``$field``, ``$$ROOT.field``, ``$$CURRENT.field``)."""
    if isinstance(expression, str):
        return any(expression == f"{root}{field}" or expression.startswith(f"{root}{field}.") for root in ("$", "$$ROOT.", "$$CURRENT."))
    if isinstance(expression, dict):
        return any(_expr_names(v, field) for v in expression.values())
    if isinstance(expression, list):
        return any(_expr_names(v, field) for v in expression)
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

    timeout_ms: StrictInt = Field(default=10_000, ge=100, le=50_000)
    max_retries: StrictInt = Field(default=5, ge=0, le=20)


#: ``w`` as text that reads as a number ("0", " 2", "1.5", "1e3"): a mistake for the number, not a tag.
_NUMBER_TEXT = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")
#: The most members a replica set has (so the most ``w`` can wait for), and the largest ``wtimeout`` (a 32-bit int).
MAX_WRITE_CONCERN_MEMBERS = 50
MAX_WTIMEOUT_MS = 2**31 - 1


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
    from_version: StrictInt = Field(ge=0, le=MAX_BSON_INT)
    to_version: StrictInt = Field(ge=0, le=MAX_BSON_INT)
    filter: dict[str, Any] = Field(default_factory=dict)
    migrate: Callable[..., Any] | None = None
    migrate_batch: Callable[..., Any] | None = None
    revert: Callable[..., Any] | None = None
    revert_batch: Callable[..., Any] | None = None
    step: Callable[..., Any] | None = None
    revert_step: Callable[..., Any] | None = None
    pipeline: list[dict[str, Any]] | None = None
    revert_pipeline: list[dict[str, Any]] | None = None
    batch_size: StrictInt = Field(default=500, ge=1, le=10_000)
    pause_ms: StrictInt = Field(default=100, ge=0, le=3_600_000)
    slice_ms: StrictInt = Field(default=30_000, ge=1_000, le=3_600_000)
    write_concern: dict[str, Any] = Field(default_factory=lambda: {"w": "majority"})
    max_document_errors: StrictInt = Field(default=0, ge=0, le=1_000)
    max_passes: StrictInt = Field(default=10, ge=1, le=1_000)
    max_conflict_retries: StrictInt = Field(default=3, ge=0, le=100)
    max_slice_failures: StrictInt = Field(default=3, ge=1, le=100)
    max_parallel: StrictInt = Field(default=1, ge=1, le=64)
    #: On a collection planned by shard: lanes at once on one shard's partitions (docs/background.md, "Sharded clusters").
    shard_concurrency: StrictInt = Field(default=1, ge=1, le=64)
    partitions: Partitions = Field(default_factory=Partitions)
    adaptive: Adaptive | Literal[False] = Field(default_factory=Adaptive)
    throttle: Callable[..., Any] | None = None
    version_field: str = "__v"
    revision_field: str = "__rev"
    occ: Literal["revision", "version-only"] = "revision"
    description: str | None = Field(default=None, max_length=512)
    transaction: Transaction | None = None
    max_replication_lag_ms: StrictInt | Literal[False] = Field(default=10_000)
    health: list[Callable[..., Any]] = Field(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _every_problem(cls, data: Any, handler: Any) -> Background:
        """Check the values one by one (pydantic), then the rules between them, and report both at once.

        Pydantic stops before the rules when a value is wrong; here the rules still run over the
        values that are right, so that one error lists everything to fix."""
        if isinstance(data, Mapping):
            data = _transaction_defaults(dict(data))
        try:
            spec: Background = handler(data)
        except ValidationError as exc:
            errors: list[Any] = list(exc.errors())
            if not isinstance(data, Mapping):
                raise
            failed = {err["loc"][0] for err in errors if err["loc"]}
            given = {k for k in data if k in cls.model_fields and k not in failed}
            values = {**_defaults(cls), **{k: data[k] for k in given}}
            values = {k: v for k, v in values.items() if k not in failed}
        else:
            errors, values, given = [], dict(spec), set(spec.model_fields_set)
        problems = [
            InitErrorDetails(type=PydanticCustomError("background_spec", message), loc=(key,) if key else (), input=None)
            for key, message in _rule_problems(values, given)
        ]
        if errors or problems:
            raise ValidationError.from_exception_data(cls.__name__, [*errors, *problems])
        return spec

    @field_validator("max_replication_lag_ms", mode="before")
    @classmethod
    def _lag(cls, value: Any) -> Any:
        if value is not False and (type(value) is not int or not 0 <= value <= 3_600_000):
            raise ValueError("must be False (never wait) or a whole number of ms from 0 to 3,600,000")
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

    @field_validator("filter", "pipeline", "revert_pipeline")
    @classmethod
    def _bson(cls, value: Any) -> Any:
        """Stored with the registration and sent to the server: a value BSON cannot hold would only
        fail there, with a traceback that quotes it. The message names the place and the type."""
        if value is not None and (problem := bson_problem(value)):
            raise ValueError(problem)
        return value

    @field_validator("write_concern")
    @classmethod
    def _write_concern(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = set(value) - {"w", "j", "wtimeout"}
        if unknown:
            raise ValueError(f"a write concern takes w, j and wtimeout, not {', '.join(sorted(unknown))}")
        w, j, wtimeout = value.get("w", 1), value.get("j", False), value.get("wtimeout", 0)
        problems = []
        if w == 0 and type(w) is int:
            problems.append("w: 0 is refused: unacknowledged writes cannot be checked or counted")
        elif isinstance(w, str) and _NUMBER_TEXT.fullmatch(w):
            # The server would take "0" or "2" as the name of a tag set, which no replica set defines:
            # every write then fails (or, with "0", was meant to be unacknowledged). A number is a number.
            problems.append(f"w: {w!r} is a number written as text: write it as a number (w = 1 or more) or name a tag such as 'majority'")
        elif type(w) is int and w > MAX_WRITE_CONCERN_MEMBERS:
            problems.append(f"w: at most {MAX_WRITE_CONCERN_MEMBERS} members (the most a replica set has)")
        elif not ((type(w) is int and w > 0) or (isinstance(w, str) and w.strip())):
            problems.append("w must be a number of members (1 or more) or a tag such as 'majority'")
        if not isinstance(j, bool):
            problems.append(f"j must be True or False, not {type(j).__name__}")
        if type(wtimeout) is not int or not 0 <= wtimeout <= MAX_WTIMEOUT_MS:
            problems.append(f"wtimeout must be a whole number of ms from 0 to {MAX_WTIMEOUT_MS} (0: no limit)")
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @field_validator("adaptive", mode="before")
    @classmethod
    def _adaptive(cls, value: Any) -> Any:
        if value is True or value is None:
            return Adaptive()
        if isinstance(value, Mapping):  # its own errors, not those of every member of the union
            return Adaptive.model_validate(value)
        return value

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


#: Settings that only mean something when the engine reads the documents itself: a step
#: migration does its own reads and writes, so giving one of them is a mistake, not a no-op.
DOCUMENT_ONLY = (
    "filter", "version_field", "revision_field", "occ", "batch_size", "adaptive", "partitions",
    "max_conflict_retries", "max_document_errors", "max_passes",
)


def _transaction_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """``transaction=True`` means the defaults; a transactional batch defaults to 100 documents."""
    value = data.get("transaction")
    if value is True:
        data["transaction"] = Transaction()
    elif value is False:
        data["transaction"] = None
    if data.get("transaction") is not None and "batch_size" not in data and data.get("step") is None:
        data["batch_size"] = 100
    return data


def _defaults(model: type[BaseModel]) -> dict[str, Any]:
    return {name: f.get_default(call_default_factory=True) for name, f in model.model_fields.items() if not f.is_required()}


def _rule_problems(v: Mapping[str, Any], given: set[str]) -> list[tuple[str, str]]:
    """The rules between values, as ``(key, problem)``: each runs only over values that are valid.

    ``v`` holds every setting (defaults for the ones not given) but those that failed their own
    check: a rule over a missing value is skipped. ``given`` holds the keys written."""
    out: list[tuple[str, str]] = []
    old, new = v.get("from_version"), v.get("to_version")
    if type(old) is int and type(new) is int:
        if new == old:
            out.append(("to_version", "from_version and to_version must differ"))
        elif new < old:
            out.append(("to_version", "to_version must be greater than from_version (revert is declared with revert=...)"))
    transforms = {"migrate", "migrate_batch", "pipeline", "step"}
    if transforms <= set(v):
        forms = [n for n in ("migrate", "migrate_batch", "pipeline", "step") if v[n] is not None]
        if len(forms) != 1:
            out.append(("", f"give exactly one of migrate, migrate_batch, pipeline or step (got {', '.join(forms) or 'none'})"))
    step = v.get("step") is not None
    reverts = [n for n in ("revert", "revert_batch", "revert_pipeline") if v.get(n) is not None]
    if step and reverts:
        out.append((reverts[0], "a step migration reverts with revert_step"))
    if not step and v.get("revert_step") is not None and "step" in v:
        out.append(("revert_step", "revert_step goes with step"))
    if len(reverts) > 1:
        out.append(("", f"give at most one of revert, revert_batch or revert_pipeline (got {', '.join(reverts)})"))
    fields = [v[n] for n in ("version_field", "revision_field") if isinstance(v.get(n), str)]
    if len(fields) == 2 and fields[0] == fields[1]:
        out.append(("revision_field", "version_field and revision_field must differ"))
    if v.get("occ") == "version-only" and "revision_field" in given:
        # The guard of version-only is the version alone: a revision field given with it would be ignored.
        out.append(("revision_field", "occ='version-only' guards writes by the version alone: leave revision_field out, or use occ='revision'"))
    if step:
        out += [(key, "a step migration does its own reads and writes: leave it out") for key in DOCUMENT_ONLY if key in given]
        if type(v.get("max_parallel")) is int and v["max_parallel"] != 1:
            out.append(("max_parallel", "a step migration runs as one partition: max_parallel must be 1"))
    for name in ("pipeline", "revert_pipeline"):
        if isinstance(v.get(name), list):
            try:
                _check_pipeline(name, v[name], (*fields, "_id"))
            except ValueError as exc:
                out.append((name, str(exc)))
    if isinstance(v.get("filter"), dict):
        owned = {v.get("version_field"): "the engine matches the version itself", v.get("revision_field"): "the engine guards its writes by it"}
        out += [("filter", f"filter may not name {f}: {owned.get(f, 'the engine owns it')}") for f in fields if _names_field(v["filter"], f)]
    adaptive = v.get("adaptive")
    if isinstance(adaptive, Adaptive) and adaptive.max_batch_size is not None and adaptive.max_batch_size < adaptive.min_batch_size:
        out.append(("adaptive", "adaptive.max_batch_size is below adaptive.min_batch_size"))
    return out
