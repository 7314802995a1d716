"""What reaches the CLI's last line of defence still ends as one JSON document under ``--json`` and a stable code,
never a bare traceback: a ``BaseException`` that is no ``Exception`` (the project's code can raise one past a
guard yet unknown), and click's ``Abort`` (a Ctrl-C before the run's own signal handler is in place)."""

from __future__ import annotations

import json

import click
import pytest


class Escaped(BaseException):
    pass


@pytest.mark.parametrize("raised", [Escaped("from somewhere"), GeneratorExit()])
def test_a_base_exception_that_escapes_is_exit_1_with_one_document(project, cli, monkeypatch, raised: BaseException) -> None:  # type: ignore[no-untyped-def]
    from mongoshift.cli import main as module

    def escapes(*args: object, **kwargs: object) -> None:
        raise raised

    monkeypatch.setattr(module.cli, "main", escapes)
    result = cli(project, "status", "--json")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    error = json.loads(result.stdout)["error"]
    assert error["kind"] == "error" and error["message"].startswith(f"unexpected {type(raised).__name__}")


def test_an_abort_under_json_still_prints_its_document(project, cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from mongoshift.cli import main as module

    def aborts(*args: object, **kwargs: object) -> None:
        raise click.exceptions.Abort()

    monkeypatch.setattr(module.cli, "main", aborts)
    result = cli(project, "status", "--json")
    assert result.returncode == 11 and "aborted" in result.stderr
    assert json.loads(result.stdout)["error"] == {"code": 11, "kind": "aborted", "message": "aborted"}
    plain = cli(project, "status")
    assert plain.returncode == 11 and plain.stdout == ""


def test_a_second_ctrl_c_while_the_first_abort_is_said_is_130_without_a_traceback(project, cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A slow start (a busy host: imports take seconds) takes the first Ctrl-C before ``background run`` has its own
    handler (click's ``Abort``); a second one landed while that ``aborted`` was being said (rich loading for it) and
    ended in a traceback, with no JSON document."""
    from mongoshift.cli import main as module, output

    def aborts(*args: object, **kwargs: object) -> None:
        raise click.exceptions.Abort()

    said = {"n": 0}
    emit = output.Output.emit_json

    def second_ctrl_c(document: object) -> None:
        said["n"] += 1
        if said["n"] == 1:
            raise KeyboardInterrupt
        emit(document)

    monkeypatch.setattr(module.cli, "main", aborts)
    monkeypatch.setattr(output.Output, "emit_json", staticmethod(second_ctrl_c))
    result = cli(project, "background", "run", "--all", "--json")
    assert result.returncode == 130 and "Traceback" not in result.stderr
    assert json.loads(result.stdout)["error"]["kind"] == "second_signal"
    monkeypatch.setattr(output.Output, "emit_json", staticmethod(emit))

    def loading_rich(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt  # where the second Ctrl-C landed: an Output loads rich, which takes a while

    monkeypatch.setattr(output.Output, "__init__", loading_rich)
    first = cli(project, "background", "run", "--all", "--json")  # the abort's document needs no Output
    assert first.returncode == 11 and json.loads(first.stdout)["error"]["kind"] == "aborted"


class _InterruptedImport:
    """A meta path finder under which importing ``name`` is interrupted, as a Ctrl-C during its import would be."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname: str, path: object, target: object = None) -> None:
        if fullname == self.name:
            raise KeyboardInterrupt
        return None


@pytest.mark.parametrize("as_json", [True, False])
def test_a_ctrl_c_while_the_command_line_loads_is_aborted_without_a_traceback(monkeypatch, capsys, as_json: bool) -> None:  # type: ignore[no-untyped-def]
    """Found in a user trial: on a busy host, a Ctrl-C in the seconds the program spends loading (click, the driver, the
    commands) printed Python's traceback of whatever was being imported, and no document under ``--json``."""
    import sys

    from mongoshift.cli.launch import main

    monkeypatch.delitem(sys.modules, "mongoshift.cli.main", raising=False)  # put back afterwards: the next import is this test's
    monkeypatch.setattr(sys, "meta_path", [_InterruptedImport("mongoshift.cli.main"), *sys.meta_path])
    with pytest.raises(SystemExit) as ended:
        main(["status", *(["--json"] if as_json else [])])
    assert ended.value.code == 11
    out, err = capsys.readouterr()
    assert err == "error: stopped (Ctrl-C) while mongoshift was starting; nothing ran\n"
    if as_json:
        assert json.loads(out)["error"] == {"code": 11, "kind": "aborted", "message": "stopped (Ctrl-C) while mongoshift was starting; nothing ran"}
    else:
        assert out == ""


def test_the_program_starts_through_the_launcher() -> None:
    """The console script and ``python -m mongoshift`` both go through it (a reinstall picks the script up)."""
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    scripts = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts["mongoshift"] == "mongoshift.cli.launch:main"
    assert "from mongoshift.cli.launch import main" in (root / "src" / "mongoshift" / "__main__.py").read_text(encoding="utf-8")


def _json_lines(err: str) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in err.splitlines()]  # each line one JSON object, or this fails
    assert lines, "no line on stderr"
    return lines


def test_a_ctrl_c_past_every_handler_is_a_json_line_under_log_format_json(project, cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Click's ``Abort`` (a first Ctrl-C before the run's handler) and a Ctrl-C that nothing took (said as a second
    one's 130) printed a plain ``error:`` / ``mongoshift:`` line, where every other failure's line is JSON."""
    from mongoshift.cli import main as module

    def aborts(*args: object, **kwargs: object) -> None:
        raise click.exceptions.Abort()

    monkeypatch.setattr(module.cli, "main", aborts)
    result = cli(project, "status", "--log-format", "json")
    assert result.returncode == 11
    (line,) = _json_lines(result.stderr)
    assert (line["level"], line["kind"], line["code"], line["message"]) == ("error", "aborted", 11, "aborted")

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(module.cli, "main", interrupted)
    result = cli(project, "status", "--log-format=json", "--json")
    assert result.returncode == 130 and json.loads(result.stdout)["error"]["kind"] == "second_signal"
    (line,) = _json_lines(result.stderr)
    assert (line["kind"], line["code"]) == ("second_signal", 130)


def test_a_ctrl_c_while_the_command_line_loads_is_a_json_line_under_log_format_json(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    import sys

    from mongoshift.cli.launch import main

    monkeypatch.delitem(sys.modules, "mongoshift.cli.main", raising=False)  # put back afterwards: the next import is this test's
    monkeypatch.setattr(sys, "meta_path", [_InterruptedImport("mongoshift.cli.main"), *sys.meta_path])
    with pytest.raises(SystemExit) as ended:
        main(["status", "--log-format", "json"])
    assert ended.value.code == 11
    out, err = capsys.readouterr()
    (line,) = _json_lines(err)
    assert out == "" and (line["level"], line["kind"], line["code"]) == ("error", "aborted", 11)
    assert line["message"] == "stopped (Ctrl-C) while mongoshift was starting; nothing ran"
