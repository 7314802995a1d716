"""Commands that ask first: without anyone to ask and without ``--yes`` they refuse with exit 42
(confirmation_required), never 6, since nothing is wrong with the configuration."""

from __future__ import annotations

import io
import json
import sys

import pytest

from .test_cli import QUICK

ASKING = [
    ("up", "--force", "0001_a"),
    ("baseline", "--to", "0001_a"),
    ("background", "cancel", "0001_a"),
    ("background", "repin", "0001_a"),
    ("background", "unlock", "0001_a"),
    ("background", "retry", "--from-start", "0001_a"),
]


@pytest.fixture
def no_terminal(cli, monkeypatch):  # type: ignore[no-untyped-def]
    """The command with stdin not a terminal (as in CI), whatever runs the tests."""
    monkeypatch.setattr(sys, "stdin", io.StringIO())
    return cli


@pytest.mark.parametrize("args", ASKING, ids=lambda a: " ".join(a))
def test_a_prompt_without_a_terminal_exits_42_and_names_yes(project, sync_client, args: tuple[str, ...], no_terminal) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    result = no_terminal(project, *args)
    assert result.returncode == 42, result.stderr
    assert "--yes" in result.stderr and "config" not in result.stderr.lower()
    assert sync_client[project.db].list_collection_names() == []  # nothing was changed, not even a record

    document = json.loads(no_terminal(project, *args, "--json").stdout)  # --json never asks either
    assert document["error"]["code"] == 42 and document["error"]["kind"] == "confirmation_required"
