"""Bad values on the command line and in the project's files: a clear one-line error, the documented exit code."""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize("name", ["\udcff", "a\udcffb", "\ud800"])
def test_a_tenant_name_that_is_not_utf8_is_refused_with_46(project, name: str, cli) -> None:  # type: ignore[no-untyped-def]
    """An argument's bytes that are not UTF-8 reach the program as surrogates: refused as a name, shown escaped."""
    result = cli(project, "status", "--tenant", name, "--json")
    assert result.returncode == 46, result.stdout
    error = json.loads(result.stdout)["error"]
    assert "valid UTF-8" in error["message"] and "\\" in error["details"]["tenant"]
    assert "\udcff" not in result.stderr and "\ud800" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [["lint", "a\u202eb"], ["baseline", "--to", "a\u202eb"], ["background", "unlock", "a\u202eb"], ["status", "--dir", "a\u202eb"]],
)
def test_bidirectional_controls_of_an_argument_never_reach_the_terminal(project, args: list[str], cli) -> None:  # type: ignore[no-untyped-def]
    """U+202E would show the rest of the error line reversed: dropped like the other control characters."""
    result = cli(project, *args)
    assert result.returncode in (8, 42), result.stderr
    assert "ab" in result.stderr and "\u202e" not in result.stderr + result.stdout
