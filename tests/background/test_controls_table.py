"""Every control from every status, through the command line: exit code, ``applied`` and the status after.

The table below is docs/background.md's ("Controls"), written out again on purpose: the test
must not read it from the code it checks. A control's decision depends only on the status (and,
for the moves back to ``pending``, on an unmet ``requires``), so each case puts the migration in
its status by writing the state document, then runs the real command in-process through
the shared ``cli`` fixture (argv to exit code and JSON, as a shell gets them).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from .conftest import background_file

STATUSES = ("blocked", "pending", "running", "paused", "completed", "failed", "cancelled")
SAME = "="  # already in effect: exit 0, applied "unchanged", the status stays
CONFLICT = 33

#: command -> what it does from each status of STATUSES, in that order.
TABLE: dict[tuple[str, ...], tuple[str | int, ...]] = {
    ("pause",): ("paused", "paused", "paused", SAME, CONFLICT, CONFLICT, CONFLICT),
    ("resume",): (SAME, SAME, SAME, "pending", CONFLICT, CONFLICT, CONFLICT),
    ("cancel", "--yes"): ("cancelled", "cancelled", "cancelled", "cancelled", CONFLICT, CONFLICT, SAME),
    ("retry",): (SAME, SAME, SAME, CONFLICT, "pending", "pending", "pending"),
    ("retry", "--from-start", "--yes"): (CONFLICT, CONFLICT, CONFLICT, CONFLICT, "pending", "pending", "pending"),
}

A, B = "0001_a.py", "0002_b.py"  # B requires A: registered blocked


class Cli:
    """The project's command line, in this process; the state collection, written directly."""

    def __init__(self, project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
        self.project = project
        self.cli = cli
        self.states = sync_client[project.db]["_mongoshift_background"]
        self.partitions = sync_client[project.db]["_mongoshift_background_partitions"]

    def __call__(self, *args: str) -> tuple[int, dict[str, Any]]:
        code, out, _ = self.cli(self.project, *args, "--json")
        return code, json.loads(out) if out.strip() else {}

    def control(self, command: tuple[str, ...], name: str) -> tuple[int, dict[str, Any]]:
        return self("background", command[0], name.removesuffix(".py"), *command[1:])

    def put(self, snapshot: dict[str, Any], status: str) -> None:
        self.states.replace_one({"_id": snapshot["_id"]}, {**snapshot, "status": status})

    def status(self, name: str) -> str:
        return str(self.states.find_one({"_id": name})["status"])  # type: ignore[index]


@pytest.fixture
def table_cli(project, sync_client, cli):  # type: ignore[no-untyped-def]
    project.add(A, background_file())
    project.add(B, 'requires = ["0001_a"]\n' + background_file())
    table = Cli(project, sync_client, cli)
    code, _ = table("up")
    assert code == 0
    assert (table.status(A), table.status(B)) == ("pending", "blocked")
    return table


def _cases() -> list[tuple[tuple[str, ...], str, str | int]]:
    return [(command, status, outcomes[i]) for command, outcomes in TABLE.items() for i, status in enumerate(STATUSES)]


def test_every_control_from_every_status_answers_as_the_table_says(table_cli) -> None:  # type: ignore[no-untyped-def]
    cli = table_cli
    snapshots = {name: cli.states.find_one({"_id": name}) for name in (A, B)}
    wrong = []
    for command, status, expected in _cases():
        # "blocked" is B as registered (its requirement unmet); every other status is A's.
        name = B if status == "blocked" else A
        cli.put(snapshots[name], status)
        code, out = cli.control(command, name)
        if expected == CONFLICT:
            got: tuple[Any, ...] = (code, out.get("error", {}).get("kind"), cli.status(name))
            want: tuple[Any, ...] = (CONFLICT, "background_conflict", status)
        elif expected == SAME:
            got, want = (code, out.get("applied"), out.get("status"), cli.status(name)), (0, "unchanged", status, status)
        else:
            got, want = (code, out.get("applied"), out.get("status"), cli.status(name)), (0, "applied", expected, expected)
        if got != want:
            wrong.append(f"{' '.join(command)} from {status}: got {got}, want {want}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(("status", "command"), [("paused", ("resume",)), ("cancelled", ("retry",))])
def test_resume_and_retry_never_step_over_an_unmet_requirement(table_cli, status: str, command: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    """B was paused (or cancelled) while it waited for A: it goes back to waiting, not to pending."""
    cli = table_cli
    cli.put(cli.states.find_one({"_id": B}), status)  # type: ignore[arg-type]
    code, out = cli.control(command, B)
    assert (code, out["applied"], out["status"], cli.status(B)) == (0, "applied", "blocked", "blocked")


def test_unlock_and_repin_fit_every_status_and_say_whether_they_changed_anything(table_cli) -> None:  # type: ignore[no-untyped-def]
    cli = table_cli
    snapshot = cli.states.find_one({"_id": A})
    path = cli.project.migrations / A
    for status in STATUSES:
        cli.put(snapshot, status)  # type: ignore[arg-type]
        cli.partitions.insert_one({"background": A, "generation": 0, "seq": 0, "status": "running", "lease": {"slot": 0, "token": "t"}})
        unlocks = [cli.control(("unlock", "--yes"), A) for _ in range(2)]
        assert [(code, out.get("applied")) for code, out in unlocks] == [(0, "applied"), (0, "unchanged")], (status, unlocks)
        path.write_text(path.read_text() + f"# {status}\n")  # a new version of the file (a comment)
        repins = [cli.control(("repin", "--yes"), A) for _ in range(2)]
        assert [(code, out["applied"]) for code, out in repins] == [(0, "applied"), (0, "unchanged")], status
        assert cli.status(A) == status
