"""How ``background dry-run`` shows its documents: a side-by-side diff per document.

On a terminal each document is a rich table (field, before, after), the changed fields marked
and the unchanged ones dimmed, then the update the engine would send. Piped, the same as
tab-separated lines. Values are one-line relaxed Extended JSON, without terminal control
characters. This is the one output that prints document values and ``_id``s: the user asked
to see them (docs/background.md, "Before you run").
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..background.inspect.preview import Preview, PreviewRow
from ..project.redaction import strip_controls
from ..project.wording import plural
from ..schema.index_specs import as_json

_MISSING = object()


def _json(value: Any) -> str:
    """One line of relaxed Extended JSON."""
    return strip_controls(json.dumps(as_json({"v": value})["v"], ensure_ascii=False))


def _value(value: Any) -> str:
    return "" if value is _MISSING else _json(value)


def fields(row: PreviewRow) -> list[tuple[str, str, str, str]]:
    """(mark, field, before, after) for every field of either side, in the order of ``after`` then the removed ones.

    The mark is ``~`` changed, ``+`` added, ``-`` removed, empty when the same."""
    after = row.after or {}
    names = [*after, *(k for k in row.before if k not in after)]
    out = []
    for name in names:
        old, new = row.before.get(name, _MISSING), after.get(name, _MISSING)
        old_text, new_text = _value(old), _value(new)
        mark = "+" if old is _MISSING else "-" if new is _MISSING else "" if old_text == new_text else "~"
        out.append((mark, strip_controls(str(name)), old_text, new_text))
    return out


def heading(preview: Preview) -> str:
    chosen = "first by _id" if preview.method == "first" else "random sample"
    if preview.found < preview.requested:  # "1 of 5 documents" would read as one document out of five in the collection
        chosen += f"; {preview.requested} asked for, only {preview.found} matched"
    sample = f"{plural(preview.found, 'document')} ({chosen})"
    direction = "" if preview.direction == "forward" else " (revert)"
    if preview.steps is not None:
        return (
            f"{preview.name}: {preview.collection}, {plural(len(preview.steps), 'step call')} validated, stopped: {preview.stopped}; "
            f"{plural(len(preview.refusals), 'operation')} refused; the transaction was aborted, nothing was written"
        )
    if preview.validated:
        return (
            f"{preview.name}{direction}: {preview.collection} v{preview.from_version} -> v{preview.to_version}, "
            f"{sample} validated: {preview.invalid} refused by the server, "
            f"{preview.failed} failed before writing, {plural(len(preview.refusals), 'operation')} refused by the sandbox; "
            "the transaction was aborted, nothing was written"
        )
    return (
        f"{preview.name}{direction}: {preview.collection} v{preview.from_version} -> v{preview.to_version}, "
        f"{sample}: {preview.migrated} would be rewritten, "
        f"{preview.failed} would fail; nothing was written"
    )


def render(console: Console, preview: Preview) -> None:
    console.print(escape(heading(preview)), style="bold", soft_wrap=True)
    if preview.pipeline is not None:
        console.print(escape(f"pipeline sent for each document: {_json(preview.pipeline)}"), style="dim", soft_wrap=True)
    for row in preview.rows:
        console.print()
        console.print(escape(f"_id {_value(row.id)}"), style="bold", soft_wrap=True)
        for line in row_validation(row):
            console.print(escape(line.replace("\t", "  ")), style="red" if "failed" in line else "", soft_wrap=True)
        if not row.ok:
            console.print(escape(f"{row.reason} error: {row.error}"), style="red", soft_wrap=True)
            continue
        table = Table("", "field", "before", "after", show_edge=False)
        for column in table.columns[1:]:
            column.overflow = "fold"
        for mark, name, old, new in fields(row):
            style = {"": "dim", "+": "green", "-": "red", "~": "yellow"}[mark]
            table.add_row(mark, escape(name), escape(old), escape(new), style=style)
        console.print(table, width=console.width)
        console.print(escape(f"update: {_json(row.update)}"), soft_wrap=True)
    for line in validation_lines(preview):
        console.print(escape(line.replace("\t", "  ")), soft_wrap=True)


def plain(preview: Preview) -> None:
    """Piped: the heading, then per document ``_id``, one ``mark<TAB>field<TAB>before<TAB>after`` line per field
    (``=`` for a field that stays the same) and the update, or its error."""
    print(heading(preview))
    if preview.pipeline is not None:
        print(f"pipeline\t{_json(preview.pipeline)}")
    for row in preview.rows:
        print(f"_id\t{_value(row.id)}")
        for line in row_validation(row):
            print(line)
        if not row.ok:
            print(f"error\t{row.reason}\t{strip_controls(row.error or '')}")
            continue
        for mark, name, old, new in fields(row):
            print(f"{mark or '='}\t{name}\t{old}\t{new}")
        print(f"update\t{_json(row.update)}")
    for line in validation_lines(preview):
        print(line)


def row_validation(row: PreviewRow) -> list[str]:
    """``validation<TAB>status<TAB>reason``, then one ``operation``/``side_effect`` line each (names and counts only)."""
    v = row.validation
    if v is None:
        return []
    lines = [f"validation\t{v.status}\t{strip_controls(v.reason or '')}"]
    lines += [f"operation\t{op['operation']}\t{op['collection']}\t{op['count']}" for op in v.operations]
    lines += [f"side_effect\t{name}\t{n}" for name, n in v.side_effects.items()]
    return lines


def validation_lines(preview: Preview) -> list[str]:
    """The step calls of a validated step migration, then every refused operation."""
    lines: list[str] = []
    for step in preview.steps or []:
        lines.append(f"step\t{step.index}\tdone={step.done}\tcheckpoint={_json(step.checkpoint)}\topen_cursors={step.open_cursors}")
        if step.error:
            lines.append(f"error\t{strip_controls(step.error)}")
        lines += [f"operation\t{op['operation']}\t{op['collection']}\t{op['count']}" for op in step.operations]
        lines += [f"side_effect\t{name}\t{n}" for name, n in step.side_effects.items()]
        for image in step.images:
            lines.append(f"image\t{image['operation']}\t{image['collection']}\t{_json(image['before'])}\t{_json(image['after'])}")
    lines += [f"refused\t{r.operation}\t{strip_controls(r.target)}\t{r.reason}" for r in preview.refusals]
    return lines
