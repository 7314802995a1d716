"""The lint rules: a stable id each (CI configurations and suppression comments name them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    id: str
    name: str
    summary: str


RULES: dict[str, Rule] = {
    rule.id: rule
    for rule in (
        Rule("MS100", "suppression-without-reason", "a suppression comment without a reason, or naming no known rule (never suppressible)"),
        Rule("MS101", "drop-without-down", "a collection, index or database dropped by a file that has no down"),
        Rule("MS102", "unbounded-bulk-write", "update_many / delete_many without an _id-bounded filter inside the line"),
        Rule("MS103", "unique-index-unchecked", "a unique index built over existing data with no duplicate check before it"),
        Rule("MS104", "transaction-refused-operation", "use_transaction = True with an operation MongoDB refuses inside a transaction"),
        Rule("MS105", "version-field-removed", "a background migrate or revert that removes the version field"),
    )
}

#: Rules a comment may name by id or by name.
BY_NAME = {rule.name: rule.id for rule in RULES.values()}
