"""The project's code may raise anything while it imports: a migration file, the hooks module, a
``uri_factory`` module and a tenants ``provider`` module each fail with their own exit code and one
JSON document, never a traceback and exit 1, and never an exit code the code chose (README, "Migration
files": code you call never decides mongoshift's exit code)."""

from __future__ import annotations

import json

import pytest

# What a file may raise while it imports besides an ``Exception``: each once reached the user as a traceback
# with exit 1 and nothing on stdout under --json (a KeyboardInterrupt of a factory or a provider: exit 11,
# "aborted", as if Ctrl-C had been pressed).
RAISES = {
    "own_base_exception": "class Boom(BaseException):\n    pass\n\nraise Boom('x')\n",
    "cancelled_error": "import asyncio\n\nraise asyncio.CancelledError()\n",
    "generator_exit": "raise GeneratorExit()\n",
    "keyboard_interrupt": "raise KeyboardInterrupt\n",
}
NAMES = {"own_base_exception": "Boom", "cancelled_error": "CancelledError", "generator_exit": "GeneratorExit",
         "keyboard_interrupt": "KeyboardInterrupt"}


def _error(result, code: int, kind: str) -> dict:  # type: ignore[no-untyped-def]
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    error = json.loads(result.stdout)["error"]  # the whole of stdout is one document
    assert error["code"] == code and error["kind"] == kind
    return error  # type: ignore[no-any-return]


@pytest.mark.parametrize("raised", sorted(RAISES))
def test_a_migration_file_that_raises_anything_while_importing_is_exit_20(project, cli, sync_client, raised: str) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_broken.py", RAISES[raised])
    error = _error(cli(project, "up", "--json"), 20, "invalid_export")
    assert error["message"].startswith("0001_broken.py: failed to import (line ") and NAMES[raised] in error["message"]
    assert _error(cli(project, "dry-run", "up", "--json"), 20, "invalid_export")["message"] == error["message"]
    assert project.db not in sync_client.list_database_names()  # refused before anything was written


@pytest.mark.parametrize("raised", sorted(RAISES))
def test_a_hooks_module_that_raises_anything_while_importing_is_exit_12(project, cli, raised: str) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", "def up(ctx):\n    pass\n")
    (project.root / "hooks.py").write_text(RAISES[raised], encoding="utf-8")
    project.config.write_text(project.config.read_text(encoding="utf-8") + 'hooks = "hooks.py"\n', encoding="utf-8")
    error = _error(cli(project, "up", "--json"), 12, "hook_failed")
    assert "hooks.py failed to import" in error["message"] and NAMES[raised] in error["message"]


@pytest.mark.parametrize("raised", sorted(RAISES))
def test_a_uri_factory_module_that_raises_anything_while_importing_is_exit_41(project, cli, raised: str) -> None:  # type: ignore[no-untyped-def]
    module = f"uri_source_{raised}"
    (project.root / f"{module}.py").write_text(RAISES[raised], encoding="utf-8")
    project.config.write_text(
        f'[mongoshift]\nuri_factory = "{module}:mongo_uri"\ndb = "{project.db}"\nmigrations_dir = "migrations"\n', encoding="utf-8"
    )
    error = _error(cli(project, "status", "--json"), 41, "uri_unavailable")
    assert "failed to import" in error["message"] and NAMES[raised] in error["message"]


@pytest.mark.parametrize("raised", sorted(RAISES))
def test_a_tenants_provider_module_that_raises_anything_while_importing_is_exit_46(project, cli, raised: str) -> None:  # type: ignore[no-untyped-def]
    module = f"tenant_source_{raised}"
    (project.root / f"{module}.py").write_text(RAISES[raised], encoding="utf-8")
    project.config.write_text(
        project.config.read_text(encoding="utf-8") + f'[mongoshift.tenants]\nprovider = "{module}:tenants"\n', encoding="utf-8"
    )
    error = _error(cli(project, "status", "--all-tenants", "--json"), 46, "tenants_invalid")
    assert "failed to import" in error["message"] and NAMES[raised] in error["message"]


@pytest.mark.parametrize("raised", sorted(RAISES))
def test_a_models_package_that_raises_anything_while_importing_is_exit_49(project, cli, raised: str) -> None:  # type: ignore[no-untyped-def]
    """The models import in a worker thread, where a real Ctrl-C never arrives as ``KeyboardInterrupt`` (it sets the
    run's cancel, exit 11 before anything is written): one raised there is the package's own."""
    package = project.root / f"models_{raised}"
    package.mkdir()
    (package / "__init__.py").write_text(RAISES[raised], encoding="utf-8")
    error = _error(cli(project, "collections", "generate", "--models", package.name, "--json"), 49, "models_invalid")
    assert f"models module '{package.name}' failed to import" in error["message"] and NAMES[raised] in error["message"]


@pytest.mark.parametrize("raised", sorted(RAISES))
def test_a_declaration_file_that_raises_anything_while_importing_is_exit_6(project, cli, raised: str) -> None:  # type: ignore[no-untyped-def]
    """``collections/*.py`` as the migration files: a ``KeyboardInterrupt`` it raised ended converge with
    ``aborted``, exit 11 and no JSON document, as if Ctrl-C had been pressed."""
    (project.root / "collections").mkdir()
    (project.root / "collections" / "users.py").write_text(RAISES[raised], encoding="utf-8")
    error = _error(cli(project, "converge", "--dry-run", "--json"), 6, "config_invalid")
    assert "users.py: failed to import (line " in error["message"] and NAMES[raised] in error["message"]


def test_a_hooks_module_with_a_syntax_error_names_its_problem_in_details(project, cli, sync_client) -> None:  # type: ignore[no-untyped-def]
    """docs/exit-codes.md (12): a hooks module that does not import, or defines a hook that cannot be called, is
    refused before anything runs, with ``details.problems``; a module that did not import had no details at all."""
    project.add("0001_a.py", "def up(ctx):\n    pass\n")
    (project.root / "hooks.py").write_text("def before_all(ctx):\n    pass\n\ndef broken(:\n", encoding="utf-8")
    project.config.write_text(project.config.read_text(encoding="utf-8") + 'hooks = "hooks.py"\n', encoding="utf-8")
    error = _error(cli(project, "up", "--json"), 12, "hook_failed")
    assert "hooks.py failed to import: SyntaxError" in error["message"]
    assert len(error["details"]["problems"]) == 1 and error["details"]["problems"][0].startswith("failed to import: SyntaxError")
    assert _error(cli(project, "dry-run", "up", "--json"), 12, "hook_failed") == error
    assert project.db not in sync_client.list_database_names()  # refused before anything was written
