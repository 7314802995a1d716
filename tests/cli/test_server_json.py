"""``--json`` on the server commands: their one JSON document is where they serve, printed once they listen
(stdout held the plain URI line for ``mongoshift --json embedded``, and ``embedded --json`` was "No such
option"), so a script that parses stdout gets a document, then stops the server."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from pymongo import MongoClient

from ..conftest import cli_env


class Served:
    """A server process whose stdout is read line by line beside it (a read never blocks the test for ever)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: queue.Queue[str | None] = queue.Queue()
        stdout = process.stdout
        assert stdout is not None

        def pump() -> None:
            for line in iter(stdout.readline, ""):
                self.lines.put(line)
            self.lines.put(None)  # end of stdout

        self.reader = threading.Thread(target=pump, daemon=True)
        self.reader.start()

    def document(self) -> dict[str, object]:
        """The JSON document it printed, read up to its closing brace (the server goes on serving)."""
        lines: list[str] = []
        while not lines or lines[-1] != "}\n":
            try:  # a bound, not a timing: a server that prints no document would otherwise keep the test waiting
                line = self.lines.get(timeout=60)
            except queue.Empty:
                self.process.kill()
                pytest.fail(f"no JSON document on stdout: {lines}")
            assert line is not None and (lines or line == "{\n"), f"not a JSON document: {line!r} after {lines}"
            lines.append(line)
        return dict(json.loads("".join(lines)))

    def stop(self) -> tuple[list[str], str]:
        """Ctrl-C; what it printed on stdout after the document, and its stderr (it must end with exit 0)."""
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=60)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        self.reader.join(timeout=60)
        rest = []
        while (line := self.lines.get(timeout=60)) is not None:
            rest.append(line)
        assert self.process.stderr is not None
        err = self.process.stderr.read()
        assert self.process.returncode == 0, err
        return rest, err


@pytest.mark.parametrize("where", ["before", "after"])
def test_embedded_json_is_its_uri_once_it_listens(tmp_path: Path, where: str) -> None:
    args = ["--json", "embedded", "--port", "0"] if where == "before" else ["embedded", "--port", "0", "--json"]
    served = Served(subprocess.Popen([sys.executable, "-m", "mongoshift", *args], cwd=tmp_path, env=cli_env(),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    document = served.document()
    assert list(document) == ["uri"] and str(document["uri"]).startswith("mongodb://127.0.0.1:")
    with MongoClient(str(document["uri"]), serverSelectionTimeoutMS=30_000) as client:
        assert client.admin.command("ping")["ok"] == 1  # it listens where it says
    rest, err = served.stop()
    assert rest == [] and "mongoshift embedded: stopping" in err  # nothing after the document; its own log lines on stderr


def test_embedded_log_lines_are_json_under_log_format_json(tmp_path: Path) -> None:
    """``--log-format json`` makes every stderr line one JSON object: the server's own lines (loaded, listening,
    stopping, saved) were plain ``mongoshift embedded: ...`` text among them, which a log collector could not parse."""
    args = ["--log-format", "json", "--json", "embedded", "--port", "0", "--path", str(tmp_path / "snap.bson")]
    served = Served(subprocess.Popen([sys.executable, "-m", "mongoshift", *args], cwd=tmp_path, env=cli_env(),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    assert str(served.document()["uri"]).startswith("mongodb://127.0.0.1:")
    rest, err = served.stop()
    lines = [json.loads(line) for line in err.splitlines()]  # each line parses on its own
    assert rest == [] and lines
    assert {"time", "level", "logger", "message"} <= set(lines[0])
    messages = [line["message"] for line in lines]
    assert any(m.startswith("embedded server") and "listening" in m for m in messages)
    assert "stopping" in messages and any(m.startswith("snapshot saved to") for m in messages)


def _held_much(*args: object, **options: object) -> int:
    """A server that held many containers (cycles, as a document store's are), then stopped cleanly."""
    for _ in range(1_000):
        cycle: list[object] = []
        cycle.append(cycle)
        _HELD.append(cycle)
    return 0


_HELD: list[list[object]] = []


def test_embedded_leaves_what_the_server_held_to_the_process_end(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """After "stopping", the interpreter's last collection walked every object the server had held: 2-3 s at
    100,000 documents before the process ended. They are frozen once the server stopped, which that collection skips."""
    import gc

    from mongoshift.embedded import server

    monkeypatch.setattr(server, "run", _held_much)
    before = gc.get_freeze_count()
    try:
        assert cli(tmp_path, "embedded", "--port", "0").returncode == 0
        assert gc.get_freeze_count() >= before + 1_000
    finally:
        gc.unfreeze()
        _HELD.clear()


def test_the_embedded_module_leaves_what_the_server_held_to_the_process_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for ``python -m mongoshift.embedded``, the server the demo and the tests start."""
    import gc

    from mongoshift.embedded import __main__ as module

    monkeypatch.setattr(module, "run", _held_much)
    before = gc.get_freeze_count()
    try:
        assert module.main(["--port", "0"]) == 0
        assert gc.get_freeze_count() >= before + 1_000
    finally:
        gc.unfreeze()
        _HELD.clear()
