"""docs/background.md and docs/versioning.md as a reader meets them: a table says each case once."""

from __future__ import annotations

from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _tables(text: str) -> list[list[str]]:
    """The first cells of each markdown table's body rows, table by table (code blocks left out)."""
    tables: list[list[str]] = []
    rows: list[str] | None = None
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not line.startswith("|"):
            rows = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if rows is None:  # the header row; the separator row comes next
            rows = []
            tables.append(rows)
        elif set(cells[0]) <= set("-: "):
            continue
        else:
            rows.append(cells[0])
    return tables


@pytest.mark.parametrize("name", ["background.md", "versioning.md"])
def test_no_table_gives_the_same_case_twice(name: str) -> None:
    """'How background run ends' listed "stopped by Ctrl-C / SIGTERM" and "a second Ctrl-C / SIGTERM" twice
    each, with different words: a reader could not tell which row held."""
    for rows in _tables((DOCS / name).read_text(encoding="utf-8")):
        repeated = sorted({r for r in rows if rows.count(r) > 1 and r})
        assert not repeated, f"{name}: a table lists {repeated} more than once"
