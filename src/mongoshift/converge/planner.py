"""Declaration + server state → the actions that make one into the other. Pure: no I/O.

Per collection the actions come in the order they are applied: create the
collection (with its validator), change the validator, create indexes (one
``createIndexes``), modify indexes in place (``collMod``), rebuild indexes
(drop + create: destructive), drop undeclared indexes (only with prune). Rows
that change nothing (``unchanged``, ``keep``) and ``conflict`` rows are listed
too, so that a plan says why nothing happens to an index. One conflict refuses
the whole run before anything is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..schema.collections import CollectionDeclaration
from ..schema.index_specs import (
    IN_PLACE,
    IndexSpec,
    ValidatorSpec,
    as_json,
    key_document,
)
from .inspection import CollectionState

Target = Literal["collection", "validator", "index"]
Kind = Literal["create", "modify", "rebuild", "drop", "keep", "unchanged", "conflict"]

#: The application order within one collection.
PHASES: dict[tuple[str, str], int] = {
    ("collection", "create"): 0,
    ("validator", "modify"): 1,
    ("index", "create"): 2,
    ("index", "modify"): 3,
    ("index", "rebuild"): 4,
    ("index", "drop"): 5,
}
CHANGING = frozenset({"create", "modify", "rebuild", "drop"})
DESTRUCTIVE = frozenset({"rebuild", "drop"})


@dataclass(frozen=True)
class Action:
    """One planned step (or a reason why there is none) for one collection, validator or index."""

    collection: str
    target: Target
    action: Kind
    name: str | None = None
    reason: str | None = None
    #: What the server has (index document, validator fields); None when absent.
    before: Mapping[str, Any] | None = field(default=None, compare=False)
    #: What the declaration wants.
    after: Mapping[str, Any] | None = field(default=None, compare=False)
    #: The options that differ (server spelling), for modify and rebuild.
    changes: tuple[str, ...] = ()
    #: A rebuild that replaces a server index of another name: the one dropped first.
    replaces: str | None = None
    #: What the plan warns of about this step (it goes ahead): stored documents that fail a validator about to be
    #: set, a collection to create beside one whose name differs in case only.
    warning: str | None = field(default=None, compare=False)

    @property
    def changing(self) -> bool:
        return self.action in CHANGING

    @property
    def destructive(self) -> bool:
        return self.action in DESTRUCTIVE

    @property
    def phase(self) -> int:
        return PHASES.get((self.target, self.action), len(PHASES))

    @property
    def key(self) -> tuple[str, str, str | None, str]:
        """Identity for comparing a re-plan with the approved plan."""
        return (self.collection, self.target, self.name, self.action)

    def describe(self) -> str:
        what = self.target if self.name is None else f"index {self.name}"
        return f"{self.collection}: {self.action} {what}" + (f" ({self.reason})" if self.reason else "")

    def to_json(self, status: str) -> dict[str, Any]:
        return {
            "collection": self.collection,
            "target": self.target,
            "name": self.name,
            "action": self.action,
            "status": status,
            "destructive": self.destructive,
            "changes": list(self.changes),
            "replaces": self.replaces,
            "reason": self.reason,
            "from": as_json(dict(self.before)) if self.before is not None else None,
            "to": as_json(dict(self.after)) if self.after is not None else None,
        }


def _index_document(spec: IndexSpec) -> dict[str, Any]:
    """The document shown for an index: the declared/reported one, keys in the written form."""
    doc = {k: v for k, v in spec.document.items() if k not in ("v", "ns")}
    doc.setdefault("key", key_document(spec.key))
    return doc


def _in_place(changes: Iterable[str], declared: IndexSpec) -> bool:
    """collMod can set a TTL, hide/unhide, and make an index unique; removing a TTL or unique cannot."""
    changes = set(changes)
    if not changes <= IN_PLACE:
        return False
    if "expireAfterSeconds" in changes and declared.options.get("expireAfterSeconds") is None:
        return False
    if "unique" in changes and not declared.options.get("unique"):
        return False
    return True


#: The reason of a validator change that removes rules of the server's own (also a plan warning).
DROPS_OWN_RULES = (
    "replace the validator by the versioning rules alone: no validator is declared, so the server's other rules "
    "are removed (declare them as validator to keep them)"
)


def _own_rules(validator: Mapping[str, Any], field_names: tuple[str, str]) -> bool:
    """Whether a server validator holds rules besides those on the version and revision fields."""
    rest = dict(validator)
    schema = rest.pop("$jsonSchema", None)
    if isinstance(schema, Mapping):
        properties = {k: v for k, v in (schema.get("properties") or {}).items() if k not in field_names}
        required = [f for f in (schema.get("required") or []) if f not in field_names]
        others = {k: v for k, v in schema.items() if k not in ("properties", "required")}
        return bool(rest or properties or required or others)
    return bool(rest or schema)


def _validator_actions(declaration: CollectionDeclaration, state: CollectionState, wanted: ValidatorSpec) -> list[Action]:
    name = declaration.name
    actions: list[Action] = []
    versioning = declaration.versioning
    probe = state.probe
    if versioning is not None and probe is not None and probe.found is not False:
        field_name = versioning.field
        if probe.found and probe.field == versioning.revision_field:
            why = (
                f"raising min to {versioning.min} is refused: a document has no valid {probe.field} (none, or one that is "
                f"not a whole number of at least 0), which the rule about to be set requires with {field_name}; set it "
                f"on those documents first (0 where it is missing), or declare min = 0 until then (both typed, not required)"
            )
        elif probe.found:
            why = (
                f"raising min to {versioning.min} is refused: a document still has {field_name} below "
                f"{versioning.min} (or none, or one that is not an int); rewrite those documents first (a background migration), or declare "
                f"min = 0 until then (the version typed, not required)"
            )
        else:
            why = f"raising min to {versioning.min} is refused: {probe.error}"
        actions.append(Action(name, "validator", "conflict", reason=why, before=state.validator.document(), after=wanted.document()))
        return actions
    if wanted.same_as(state.validator):
        actions.append(Action(name, "validator", "unchanged"))
    else:
        reason = "remove the validator" if wanted.empty else ("add a validator" if state.validator.empty else "change the validator")
        if versioning is not None and "validator" not in declaration.model_fields_set and _own_rules(
            state.validator.validator, (versioning.field, versioning.revision_field)
        ):
            reason = DROPS_OWN_RULES
        actions.append(
            Action(name, "validator", "modify", reason=reason, before=state.validator.document(), after=wanted.document(),
                   warning=_violation_warning(state, wanted))
        )
    return actions


def _violation_warning(state: CollectionState, wanted: ValidatorSpec) -> str | None:
    """What to say when documents already stored fail the validator about to be set (collMod does not check them)."""
    probe = state.violations
    if probe is None or probe.found is False:
        return None
    settings = f'validation_level "{wanted.level}", validation_action "{wanted.action}"'
    if probe.found is None:
        return f"could not tell whether a stored document fails the new validator ({probe.error}); under {settings} its next update would be refused"
    return (
        f"at least one stored document does not match the new validator: under {settings} the next update of such a "
        'document is refused until it matches; fix those documents first, or declare validation_level = "moderate" (or validation_action = "warn") until then'
    )


def _index_actions(declaration: CollectionDeclaration, state: CollectionState, *, prune: bool) -> list[Action]:
    name = declaration.name
    wanted = declaration.index_specs(state.shard_key_spec)
    declared_names = {spec.name for spec in wanted}
    server_by_name = {spec.name: spec for spec in state.indexes}
    claimed: set[str] = set()
    actions: list[Action] = []
    for spec in wanted:
        current = server_by_name.get(spec.name)
        if current is not None:
            claimed.add(current.name)
            if current.key != spec.key:
                actions.append(
                    Action(
                        name, "index", "conflict", spec.name,
                        reason=f"the server's index {spec.name!r} has other keys {key_document(current.key)}; "
                        "declare the new keys under a new name",
                        before=_index_document(current), after=_index_document(spec),
                    )
                )
                continue
            changes = spec.differences(current, state.default_collation)
            if not changes:
                actions.append(Action(name, "index", "unchanged", spec.name))
            elif _in_place(changes, spec):
                actions.append(
                    Action(name, "index", "modify", spec.name, reason="change " + ", ".join(changes),
                           before=_index_document(current), after=_index_document(spec), changes=changes)
                )
            else:
                actions.append(
                    Action(name, "index", "rebuild", spec.name, reason=", ".join(changes) + " cannot change in place",
                           before=_index_document(current), after=_index_document(spec), changes=changes)
                )
            continue
        twin = next(
            (s for s in state.indexes if s.name not in declared_names and s.name not in claimed and spec.same_identity(s, state.default_collation)),
            None,
        )
        if twin is None:
            actions.append(Action(name, "index", "create", spec.name, after=_index_document(spec)))
            continue
        claimed.add(twin.name)
        changes = spec.differences(twin, state.default_collation)
        if not changes:
            actions.append(
                Action(name, "index", "unchanged", spec.name,
                       reason=f"exists as {twin.name!r} (the server keeps one index per key, filter and collation)")
            )
        elif prune:
            differ = "differs" if len(changes) == 1 else "differ"
            actions.append(
                Action(name, "index", "rebuild", spec.name, reason=f"replaces the undeclared {twin.name!r} ({', '.join(changes)} {differ})",
                       before=_index_document(twin), after=_index_document(spec), changes=changes, replaces=twin.name)
            )
        else:
            actions.append(
                Action(
                    name, "index", "conflict", spec.name,
                    reason=f"the undeclared index {twin.name!r} has the same keys with other options ({', '.join(changes)}); "
                    "drop it, or converge with --prune to replace it",
                    before=_index_document(twin), after=_index_document(spec),
                )
            )
    if not declaration.manages_indexes:
        return actions
    shard = state.shard_key
    for spec in state.indexes:
        if spec.name in claimed or spec.name in declared_names:
            continue
        fields = tuple(field_name for field_name, _ in spec.key)
        if shard and fields[: len(shard)] == shard:
            actions.append(Action(name, "index", "keep", spec.name, reason="supports the shard key: never pruned"))
        elif prune:
            actions.append(Action(name, "index", "drop", spec.name, reason="not declared; pruned", before=_index_document(spec)))
        else:
            actions.append(Action(name, "index", "keep", spec.name, reason="not declared; kept without --prune"))
    return actions


def plan_collection(declaration: CollectionDeclaration, state: CollectionState, *, prune: bool = False) -> list[Action]:
    """The actions for one collection, in application order."""
    name = declaration.name
    prune = declaration.prunes(prune)
    if state.kind in ("view", "timeseries"):
        return [Action(name, "collection", "conflict", reason=f"{name!r} is a {state.kind}: converge manages only plain collections")]
    wanted_validator = declaration.validator_spec()
    if not state.exists:
        after: dict[str, Any] = {}
        if wanted_validator is not None and not wanted_validator.empty:
            after = wanted_validator.document()
        twin = None
        if state.case_twins:
            stored = " and ".join(repr(t) for t in state.case_twins)
            one = len(state.case_twins) == 1
            twin = (
                f"no collection {name!r} exists, but {stored} {'does' if one else 'do'} (names that differ in case only are "
                f"other collections): converge creates {name!r} beside {'it' if one else 'them'}; if the declaration means "
                f"{'that one' if one else 'one of them'}, write its name as stored"
            )
        actions = [Action(name, "collection", "create", after=after, warning=twin)]
        actions += [Action(name, "index", "create", spec.name, after=_index_document(spec)) for spec in declaration.index_specs(state.shard_key_spec)]
        return actions
    actions = []
    if wanted_validator is not None:
        actions += _validator_actions(declaration, state, wanted_validator)
    actions += _index_actions(declaration, state, prune=prune)
    return sorted(actions, key=lambda a: a.phase)  # stable: declaration order within a phase


@dataclass(frozen=True)
class Plan:
    """Every action of a run, collection by collection in declaration order."""

    actions: tuple[Action, ...]

    @property
    def conflicts(self) -> list[Action]:
        return [a for a in self.actions if a.action == "conflict"]

    @property
    def changes(self) -> list[Action]:
        return [a for a in self.actions if a.changing]

    @property
    def destructive(self) -> list[Action]:
        return [a for a in self.actions if a.destructive]

    @property
    def in_sync(self) -> bool:
        return not self.changes and not self.conflicts


def plan(declarations: Iterable[CollectionDeclaration], states: Mapping[str, CollectionState], *, prune: bool = False) -> Plan:
    actions: list[Action] = []
    for declaration in declarations:
        actions += plan_collection(declaration, states[declaration.name], prune=prune)
    return Plan(tuple(actions))
