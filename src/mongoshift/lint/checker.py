"""One migration file read as source: the risky operations it would run, each with its rule and line.

Only what the source says literally is judged: a filter built elsewhere, a collection named
by a variable, are given the benefit of the doubt (a finding should be worth reading).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidExportError
from .suppressions import Suppression, read_suppressions

DROPS = {"drop", "drop_collection", "drop_database", "drop_index", "drop_indexes"}
BULK_WRITES = {"update_many", "delete_many"}
#: Operations the server refuses inside a multi-document transaction (MongoDB's "Operations in
#: transactions": DDL other than implicit creation, listing, the count command, change streams).
REFUSED_IN_TRANSACTION = DROPS | {
    "rename", "list_collections", "list_collection_names", "list_indexes", "index_information", "estimated_document_count", "watch",
}
FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass
class Finding:
    """One risky operation: ``collection`` when the source names it; ``documents`` when a connection counted them."""

    rule: str
    file: str
    line: int
    message: str
    collection: str | None = None
    documents: int | None = None
    #: The reason of the comment that accepted it (a suppressed finding only).
    suppressed_by: str | None = field(default=None)

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule, "file": self.file, "line": self.line, "message": self.message,
            "collection": self.collection, "documents": self.documents, "suppressed_by": self.suppressed_by,
        }


@dataclass
class FileVerdict:
    findings: list[Finding]
    suppressed: list[Finding]
    #: Suppressions that accepted nothing (stale after an edit): reported, not failing.
    unused: list[Suppression]


def lint_source(name: str, source: str, *, use_transaction_default: bool = False) -> FileVerdict:
    """Every finding of ``source`` (the file ``name``), split by the file's suppression comments."""
    try:
        tree = ast.parse(source, filename=name)
    except SyntaxError as exc:
        # a null byte is refused before any line is read: no line to name ("line None")
        where = f" (line {exc.lineno})" if exc.lineno else ""
        raise InvalidExportError(f"{name}: does not parse{where}: {exc.msg}", file=name) from None
    found = list(_Checker(name, tree, use_transaction_default).findings())
    good, bad = read_suppressions(source)
    found += [Finding("MS100", name, b.line, b.problem) for b in bad]
    allowed = {rule: s for s in good for rule in s.rules}
    kept, suppressed, used = [], [], set()
    for finding in sorted(found, key=lambda f: (f.line, f.rule)):
        accepted = allowed.get(finding.rule)
        if accepted is None:
            kept.append(finding)
            continue
        finding.suppressed_by = accepted.reason
        suppressed.append(finding)
        used.add(accepted.line)
    return FileVerdict(kept, suppressed, [s for s in good if s.line not in used])


class _Checker:
    def __init__(self, name: str, tree: ast.Module, use_transaction_default: bool) -> None:
        self.name = name
        self.tree = tree
        self.functions: dict[str, FunctionNode] = {
            node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        self.background = _background_call(tree)
        self.use_transaction = _module_constant(tree, "use_transaction", use_transaction_default) is True

    def findings(self) -> Iterator[Finding]:
        if self.background is not None:
            yield from self._version_field()
            return
        has_down = "down" in self.functions
        for fn_name, fn in self.functions.items():
            for call in _calls(fn):
                method = _method(call)
                if method is None:
                    continue
                collection = _collection(call, method)
                if method in DROPS and not has_down and fn_name != "down":
                    what = _what_dropped(call, method, collection)
                    yield Finding(
                        "MS101", self.name, call.lineno,
                        f"{fn_name} drops {what} and the file has no down: once applied, 'mongoshift down' cannot bring it back; "
                        "write a down that restores it, or accept it with a reason",
                        collection,
                    )
                if method in BULK_WRITES and not _id_bounded(call, fn):
                    where = f" on {_shown(collection)}" if collection else ""
                    yield Finding(
                        "MS102", self.name, call.lineno,
                        f"{method}{where} has no _id-bounded filter: it {'deletes' if method.startswith('delete') else 'rewrites'} "
                        "every matching document in one operation "
                        "while the line holds its lock; for a large collection use a background migration "
                        "('mongoshift create --background'), or bound the filter by _id ranges",
                        collection,
                    )
                if self.use_transaction and _refused_in_transaction(call, method):
                    # an aggregate is refused only for its $out / $merge stage: "aggregate ... refuses it" misled
                    what = f"aggregate with {_writing_stage(call)}" if method == "aggregate" else method
                    yield Finding(
                        "MS104", self.name, call.lineno,
                        f"{what} in a file with use_transaction = True: MongoDB refuses it inside a transaction; "
                        "move it to a file without a transaction",
                        collection,
                    )
                if _unique_index(call, method) and not _duplicate_check(fn) and not _created_here(fn, collection):
                    on = f" on {_shown(collection)}" if collection else ""
                    yield Finding(
                        "MS103", self.name, call.lineno,
                        f"a unique index{on} built over existing data with no duplicate check before it: one duplicate fails "
                        "the build half-way through a deploy; count duplicates first (an aggregate with $group on the key) "
                        "and stop with a clear error",
                        collection,
                    )

    def _version_field(self) -> Iterator[Finding]:
        call = self.background
        assert call is not None
        keywords = {k.arg: k.value for k in call.keywords if k.arg}
        field_node = keywords.get("version_field")
        version_field = field_node.value if isinstance(field_node, ast.Constant) and isinstance(field_node.value, str) else "__v"
        for kind in ("migrate", "revert"):
            target = keywords.get(kind)
            fn = self.functions.get(target.id) if isinstance(target, ast.Name) else None
            if fn is None or not fn.args.args:
                continue
            doc = fn.args.args[0].arg
            for node, how in _removals(fn, doc, version_field):
                yield Finding(
                    "MS105", self.name, node.lineno,
                    f"{kind} {how} the version field {version_field!r}: the engine finds the documents still to migrate "
                    "by that field, so leave it in the returned document (the engine sets it)",
                )


def _background_call(tree: ast.Module) -> ast.Call | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "background" for t in node.targets):
            if isinstance(node.value, ast.Call):
                return node.value
    return None


def _module_constant(tree: ast.Module, name: str, default: object) -> object:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if isinstance(node.value, ast.Constant):
                return node.value.value
    return default


def _calls(fn: FunctionNode) -> Iterator[ast.Call]:
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            yield node


def _method(call: ast.Call) -> str | None:
    return call.func.attr if isinstance(call.func, ast.Attribute) else None


def _collection(call: ast.Call, method: str) -> str | None:
    """The collection an operation acts on, when the source names it: ``db.users.x()``, ``db["users"].x()``,
    ``db.get_collection("users").x()``, ``db.drop_collection("users")``."""
    if method == "drop_collection" and call.args:
        return _string(call.args[0])
    assert isinstance(call.func, ast.Attribute)
    receiver = call.func.value
    if isinstance(receiver, ast.Subscript):
        return _string(receiver.slice)
    if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute) and receiver.func.attr == "get_collection" and receiver.args:
        return _string(receiver.args[0])
    if isinstance(receiver, ast.Attribute) and isinstance(receiver.value, ast.Attribute) and receiver.value.attr == "db":
        return receiver.attr
    return None


def _shown(name: str) -> str:
    """A collection or index name as a message shows it: a tab, a line break or another unprintable character of the
    source's string literal is written as its escape (``a\\tb``), so a table row stays one row (``--json`` has it as is)."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in name)


def _string(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _what_dropped(call: ast.Call, method: str, collection: str | None) -> str:
    if method in ("drop_index", "drop_indexes"):
        index = _string(call.args[0]) if call.args else None
        target = f"index {_shown(index)}" if index else ("every index" if method == "drop_indexes" else "an index")
        return f"{target} of {_shown(collection)}" if collection else target
    if method == "drop_database":
        return "a database"
    return f"collection {_shown(collection)}" if collection else "a collection"


def _filter(call: ast.Call) -> ast.AST | None:
    for keyword in call.keywords:
        if keyword.arg == "filter":
            return keyword.value
    return call.args[0] if call.args else None


def _id_bounded(call: ast.Call, fn: FunctionNode) -> bool:
    """True when the filter bounds ``_id`` (or the source does not show the filter: no finding on a guess)."""
    node = _filter(call)
    if isinstance(node, ast.Name):
        node = _assigned(fn, node.id)
    if node is None:
        return False
    if not isinstance(node, ast.Dict):
        return True
    return _has_id(node)


def _has_id(node: ast.Dict) -> bool:
    for key, value in zip(node.keys, node.values, strict=True):
        name = _string(key) if key is not None else None
        if name == "_id":
            return True
        if name == "$and" and isinstance(value, (ast.List, ast.Tuple)):
            if any(isinstance(item, ast.Dict) and _has_id(item) for item in value.elts):
                return True
    return False


def _assigned(fn: FunctionNode, name: str) -> ast.AST | None:
    """The value last assigned to ``name`` in ``fn`` (None when never plainly assigned)."""
    value: ast.AST | None = None
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            value = node.value
    return value if value is not None else ast.Name(id=name)


def _refused_in_transaction(call: ast.Call, method: str) -> bool:
    if method in REFUSED_IN_TRANSACTION:
        return True
    pipeline = _pipeline(call) if method == "aggregate" else None
    if pipeline is not None:
        return any(_string(k) in ("$out", "$merge") for d in ast.walk(pipeline) if isinstance(d, ast.Dict) for k in d.keys if k is not None)
    return False


def _pipeline(call: ast.Call) -> ast.AST | None:
    """An aggregate's pipeline as the source gives it: first argument, or ``pipeline=`` (missed before)."""
    for keyword in call.keywords:
        if keyword.arg == "pipeline":
            return keyword.value
    return call.args[0] if call.args else None


def _writing_stage(call: ast.Call) -> str:
    """The ``$out`` or ``$merge`` stage an aggregate's literal pipeline holds (the first one found)."""
    pipeline = _pipeline(call)
    for node in ast.walk(pipeline) if pipeline is not None else ():
        if isinstance(node, ast.Dict):
            for key in node.keys:
                if key is not None and _string(key) in ("$out", "$merge"):
                    return str(_string(key))
    return "$out"


def _unique_index(call: ast.Call, method: str) -> bool:
    if method == "create_index":
        return any(k.arg == "unique" and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords)
    if method == "create_indexes":
        return any(
            isinstance(node, ast.Call) and any(k.arg == "unique" and isinstance(k.value, ast.Constant) and k.value.value is True for k in node.keywords)
            for arg in call.args for node in ast.walk(arg)
        )
    return False


def _duplicate_check(fn: FunctionNode) -> bool:
    """An aggregate with a ``$group`` stage in the same function: the duplicates are counted before the build."""
    for call in _calls(fn):
        if _method(call) == "aggregate":
            for node in ast.walk(call):
                if isinstance(node, ast.Dict) and any(_string(k) == "$group" for k in node.keys if k is not None):
                    return True
    return False


def _created_here(fn: FunctionNode, collection: str | None) -> bool:
    """A collection created by the same function is empty: its unique index has nothing to check."""
    if collection is None:
        return False
    return any(_method(c) == "create_collection" and c.args and _string(c.args[0]) == collection for c in _calls(fn))


def _removals(fn: FunctionNode, doc: str, version_field: str) -> Iterator[tuple[ast.stmt | ast.expr, str]]:
    for node in ast.walk(fn):
        if isinstance(node, ast.Delete):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and _is_name(target.value, doc) and _string(target.slice) == version_field:
                    yield node, "deletes"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _is_name(node.func.value, doc):
            if node.func.attr == "pop" and node.args and _string(node.args[0]) == version_field:
                yield node, "pops"
            elif node.func.attr == "clear":
                yield node, "clears the document and with it"
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):
            keys = node.value.keys
            if None not in keys and version_field not in {_string(k) for k in keys if k is not None}:
                yield node, "returns a new document without"


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name
