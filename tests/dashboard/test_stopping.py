"""``mongoshift dashboard`` stopped by Ctrl-C or SIGTERM: a clean stop, exit 0, as ``mongoshift embedded``."""

from __future__ import annotations

import signal

import pytest


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_dashboard_cleanly_with_exit_0(fast_project, stop: signal.Signals) -> None:  # type: ignore[no-untyped-def]
    from ..conftest import reaped, start_cli

    process = start_cli(fast_project, "dashboard", "--port", "0")
    with reaped(process):
        assert process.stderr is not None
        assert process.stderr.readline().startswith("mongoshift dashboard on http://127.0.0.1:")
        assert process.stderr.readline().startswith("controls token")  # the server is listening: both lines come before it serves
        process.send_signal(stop)
        _, rest = process.communicate(timeout=60)
    assert process.returncode == 0, rest
    assert rest.strip().splitlines() == [f"mongoshift dashboard: stopped ({stop.name})"]


def test_with_json_the_dashboard_has_printed_one_document_when_it_stops(fast_project) -> None:  # type: ignore[no-untyped-def]
    """``--json`` promises one JSON document on stdout (it printed nothing, so ``| python -m json.tool`` failed):
    the one it prints once it listens, and none more when it stops."""
    import json

    from ..conftest import reaped, start_cli

    process = start_cli(fast_project, "dashboard", "--port", "0", "--json")
    with reaped(process):
        assert process.stderr is not None
        url = process.stderr.readline().removeprefix("mongoshift dashboard on ").strip()
        token = process.stderr.readline().rsplit(" ", 1)[-1].strip()
        process.send_signal(signal.SIGINT)
        printed, _ = process.communicate(timeout=60)
    assert process.returncode == 0
    assert json.loads(printed) == {"url": url, "read_only": False}
    assert token not in printed


def test_with_log_format_json_every_stderr_line_is_a_json_object(fast_project) -> None:  # type: ignore[no-untyped-def]
    """docs/observability.md: "every line mongoshift writes on stderr becomes one JSON object"; the dashboard's
    address, token and stop lines were plain text among them, which a log collector could not parse."""
    import json

    from ..conftest import reaped, start_cli

    process = start_cli(fast_project, "dashboard", "--port", "0", "--log-format", "json")
    with reaped(process):
        assert process.stderr is not None
        first = json.loads(process.stderr.readline())
        token = json.loads(process.stderr.readline())
        process.send_signal(signal.SIGINT)
        _, rest = process.communicate(timeout=60)
    assert process.returncode == 0
    assert first["message"].startswith("mongoshift dashboard on http://127.0.0.1:") and first["logger"] == "mongoshift.dashboard"
    assert token["message"].startswith("controls token (this run only, printed once): ")
    assert [json.loads(line)["message"] for line in rest.strip().splitlines()] == ["mongoshift dashboard: stopped (SIGINT)"]


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_uvicorns_own_lines_are_mongoshifts_lines(fast_project, log_format: str) -> None:  # type: ignore[no-untyped-def]
    """uvicorn logged with its own format (``WARNING:  Invalid HTTP request received.``, a 500's traceback): a plain
    text line among the JSON lines of ``--log-format json``, which a log collector could not parse. Its lines now go
    through mongoshift's handler: one JSON object each, or ``mongoshift: WARNING ...`` as text."""
    import json
    import socket

    from ..conftest import reaped, start_cli

    process = start_cli(fast_project, "--log-format", log_format, "dashboard", "--port", "0")
    with reaped(process):
        assert process.stderr is not None
        first = process.stderr.readline()
        url = (json.loads(first)["message"] if log_format == "json" else first).split(" on ", 1)[1].split()[0]
        process.stderr.readline()  # the token
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=60) as raw:
            raw.sendall(b"NOT HTTP \x00\r\n\r\n")
            answer = b""
            while chunk := raw.recv(4096):  # uvicorn logs the request, then answers 400 and closes
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 400")
        # The form parser's own warning on a malformed multipart body was Python's bare text ("Expected boundary ...").
        with socket.create_connection(("127.0.0.1", port), timeout=60) as raw:
            raw.sendall(b"POST /sign-in HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=x\r\n"
                        b"Content-Length: 7\r\nConnection: close\r\n\r\ngarbage")
            answer = b""
            while chunk := raw.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 400")
        process.send_signal(signal.SIGINT)
        _, rest = process.communicate(timeout=60)
    assert process.returncode == 0, rest
    lines = rest.strip().splitlines()
    if log_format == "json":
        parsed = [json.loads(line) for line in lines]
        assert [(p["level"], p["logger"], p["message"]) for p in parsed[:1]] == [("warning", "uvicorn.error", "Invalid HTTP request received.")]
        assert (parsed[1]["level"], parsed[1]["logger"]) == ("warning", "python_multipart.multipart")
    else:
        assert lines[0] == "mongoshift: WARNING Invalid HTTP request received.", lines
        assert lines[1].startswith("mongoshift: WARNING Expected boundary character"), lines
    assert len(lines) == 3, lines  # then the stop line


def test_a_project_that_names_no_server_is_refused_before_serving(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Started where no project is (no uri, no uri_command or uri_factory, no tenants), it served pages saying
    "could not connect: no server given ... trying again at each read", for ever: no read could succeed. It is
    refused as every connecting command refuses it, exit 6, before it listens."""
    done = cli(tmp_path, "dashboard", "--port", "0")
    assert done.returncode == 6, done.stderr
    assert "no server given" in done.stderr and "mongoshift dashboard on" not in done.stderr
    with_uri = cli(tmp_path, "--json", "dashboard", "--port", "0", "--uri", "mongodb://127.0.0.1:1")  # a server, no db
    assert with_uri.returncode == 6 and "no database given" in with_uri.stdout
