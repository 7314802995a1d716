"""A command that prints an outcome does not log it again: controls and ``background verify``."""

from __future__ import annotations

from typing import Any

from .conftest import background_file
from .test_verify import completed, old_shape

NAME = "0001_names.py"


def _completed(fast_project: Any) -> None:
    completed(fast_project, 20)


def test_verify_prints_its_table_and_logs_no_line_per_migration(fast_project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    _completed(fast_project)
    code, out, err = cli(fast_project, "background", "verify")
    assert code == 0 and f"{NAME}\tpeople\tclean" in out
    assert " drift:" not in err, err

    sync_client[fast_project.db].people.insert_one(old_shape(_id="late"))
    code, out, err = cli(fast_project, "background", "verify")
    assert code == 31 and "drift: reported" in out
    assert " drift:" not in err and err.count("old-shape documents written after completion") == 1, err

    code, _, err = cli(fast_project, "background", "verify", "-v")  # still there for whoever asks for more
    assert code == 31 and f"{NAME} drift: " in err


def test_a_control_prints_one_line_and_logs_no_copy_of_it(fast_project, cli) -> None:  # type: ignore[no-untyped-def]
    _completed(fast_project)
    for action, after in (("retry", "pending"), ("pause", "paused"), ("resume", "pending")):
        code, out, err = cli(fast_project, "background", action, NAME.removesuffix(".py"))
        assert code == 0 and out == f"{NAME}: {action} done; now {after}\n", out
        assert " control " not in err, err
    code, out, err = cli(fast_project, "background", "cancel", NAME.removesuffix(".py"), "--yes", "-v")
    assert code == 0 and out == f"{NAME}: cancel done; now cancelled\n"
    assert f"{NAME} control action=cancel" in err  # -v: the event's line, at DEBUG


def test_up_of_a_background_file_says_registered_once(fast_project, cli) -> None:  # type: ignore[no-untyped-def]
    fast_project.add(NAME, background_file())
    code, out, err = cli(fast_project, "up")
    assert code == 0 and f"registered: run it with 'mongoshift background run {NAME.removesuffix('.py')}'" in out  # the result
    assert err.count("registered") == 1, err  # one log line in words, not also the event's key=value line


def test_every_hint_to_run_a_background_migration_is_a_command_that_runs_it(fast_project, cli) -> None:  # type: ignore[no-untyped-def]
    """``background run`` alone runs nothing (exit 6): the hints of ``up`` and ``status --check`` name the migration."""
    fast_project.add(NAME, background_file())
    code, out, _ = cli(fast_project, "up")
    hint = f"'mongoshift background run {NAME.removesuffix('.py')}'"
    assert code == 0 and hint in out
    code, _, err = cli(fast_project, "status", "--check")
    assert code == 31 and hint in err, err
    code, _, _ = cli(fast_project, "background", "run", NAME.removesuffix(".py"))
    assert code == 0
