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
