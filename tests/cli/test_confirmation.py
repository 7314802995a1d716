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
    ("background", "cancel", "0002_bg"),
    ("background", "repin", "0002_bg"),
    ("background", "unlock", "0002_bg"),
    ("background", "retry", "--from-start", "0002_bg"),
]

BACKGROUND = """
from mongoshift import Background

def migrate(doc, ctx):
    return doc

background = Background(collection="people", from_version=0, to_version=1, migrate=migrate)
"""


def everything(sync_client, db: str) -> dict[str, list[object]]:  # type: ignore[no-untyped-def]
    return {name: list(sync_client[db][name].find()) for name in sorted(sync_client[db].list_collection_names())}


@pytest.fixture
def no_terminal(cli, monkeypatch):  # type: ignore[no-untyped-def]
    """The command with stdin not a terminal (as in CI), whatever runs the tests."""
    monkeypatch.setattr(sys, "stdin", io.StringIO())
    return cli


@pytest.mark.parametrize("args", ASKING, ids=lambda a: " ".join(a))
def test_a_prompt_without_a_terminal_exits_42_and_names_yes(project, sync_client, args: tuple[str, ...], no_terminal) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    if args[0] == "background":  # a background control asks about a registered migration only
        project.add("0002_bg.py", BACKGROUND)
        assert no_terminal(project, "up", "--to", "0002_bg").returncode == 0
    before = everything(sync_client, project.db)
    result = no_terminal(project, *args)
    assert result.returncode == 42, result.stderr
    assert "--yes" in result.stderr and "config" not in result.stderr.lower()
    assert everything(sync_client, project.db) == before  # nothing was changed, not even a record

    document = json.loads(no_terminal(project, *args, "--json").stdout)  # --json never asks either
    assert document["error"]["code"] == 42 and document["error"]["kind"] == "confirmation_required"


@pytest.mark.parametrize("args", [a for a in ASKING if a[0] == "background"], ids=lambda a: " ".join(a))
@pytest.mark.parametrize(("name", "code", "said"), [("0009_typo", 9, "not a registered background migration"), ("", 19, "cannot be empty")])
def test_a_background_control_of_a_name_not_registered_is_refused_before_asking(  # type: ignore[no-untyped-def]
    project, args: tuple[str, ...], name: str, code: int, said: str, no_terminal
) -> None:
    """A typo is not answered with 'pass --yes' (which would only lead to exit 9): it is refused at once."""
    project.add("0001_a.py", QUICK)
    result = no_terminal(project, *args[:-1], name, "--json")
    assert result.returncode == code, result.stdout
    assert said in json.loads(result.stdout)["error"]["message"]


def test_a_name_not_registered_is_told_what_to_do_by_whether_its_file_exists(project, no_terminal) -> None:  # type: ignore[no-untyped-def]
    """A file not yet applied is registered by 'up'; a typo is not, and sending its author to 'up' would run every
    pending migration for nothing: the hint says which of the two it is (exit 9 either way)."""
    project.add("0002_bg.py", BACKGROUND)
    pending = no_terminal(project, "background", "run", "0002_bg", "--json")
    typo = no_terminal(project, "background", "run", "0002_gb", "--json")
    assert (pending.returncode, typo.returncode) == (9, 9)
    assert "run 'mongoshift up' first" in json.loads(pending.stdout)["error"]["message"]
    said = json.loads(typo.stdout)["error"]["message"]
    assert "'mongoshift up'" not in said and "no file of that name in the migrations folder" in said


def test_a_baselined_background_file_is_not_sent_to_up_which_passes_over_it(project, no_terminal) -> None:  # type: ignore[no-untyped-def]
    """``baseline`` records a background file applied without registering it: 'up' then says "nothing to do", so
    the hint names what registers it after all, ``up FILE --force``, and that does."""
    project.add("0002_bg.py", BACKGROUND)
    assert no_terminal(project, "baseline", "--to", "0002_bg", "--yes").returncode == 0
    refused = no_terminal(project, "background", "run", "0002_bg", "--json")
    assert refused.returncode == 9
    said = json.loads(refused.stdout)["error"]["message"]
    assert "run 'mongoshift up' first" not in said and "recorded applied by baseline" in said, said
    assert "'mongoshift up 0002_bg.py --force'" in said
    assert no_terminal(project, "up", "0002_bg.py", "--force", "--yes").returncode == 0
    assert no_terminal(project, "background", "run", "0002_bg").returncode == 0


def test_retry_repin_refused_at_the_prompt_pins_nothing(project, sync_client, no_terminal) -> None:  # type: ignore[no-untyped-def]
    """``retry --from-start --repin`` without ``--yes`` and no terminal: exit 42 and, as it says, nothing changed
    (the file was pinned before the question)."""
    project.add("0002_bg.py", BACKGROUND)
    assert no_terminal(project, "up").returncode == 0
    assert no_terminal(project, "background", "cancel", "0002_bg", "--yes").returncode == 0
    project.add("0002_bg.py", BACKGROUND.replace("to_version=1", "to_version=1, batch_size=7"))
    before = everything(sync_client, project.db)
    result = no_terminal(project, "background", "retry", "--from-start", "--repin", "0002_bg")
    assert result.returncode == 42, result.stderr
    assert "Nothing was changed" in result.stderr and everything(sync_client, project.db) == before

    done = no_terminal(project, "background", "retry", "--from-start", "--repin", "0002_bg", "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("0002_bg.py: pinned ") and done.stdout.strip().endswith("retry done; now pending")
    assert "control action=repin" not in done.stderr  # said once, by the line above


@pytest.mark.parametrize(
    ("args", "asked"),
    [
        (("background", "cancel", "0002_bg"), "Cancel 0002_bg? Its lanes stop at their next batch"),
        (("background", "unlock", "0002_bg"), "Unlock 0002_bg? Its leases and coordinator lock are cleared"),
        (("background", "retry", "--from-start", "0002_bg"), "Retry 0002_bg from the start? Its checkpoints, passes and failed documents are forgotten"),
    ],
    ids=["cancel", "unlock", "retry --from-start"],
)
def test_a_background_prompt_is_a_question_that_says_what_it_does(project, args: tuple[str, ...], asked: str, no_terminal) -> None:  # type: ignore[no-untyped-def]
    """They read "cancel 0002_bg?", "retry from the start 0002_bg?": a command word, not a question, and
    nothing of what a yes would do."""
    project.add("0001_a.py", QUICK)
    project.add("0002_bg.py", BACKGROUND)
    assert no_terminal(project, "up", "--to", "0002_bg").returncode == 0
    result = no_terminal(project, *args)
    assert result.returncode == 42 and f"error: {asked}" in result.stderr, result.stderr
