"""Migration logs and events through the command line: ``--json`` and ``--log-format json`` (issue 14 item 2)."""

from __future__ import annotations

import json

LOGS = """
from bson import ObjectId

async def up(ctx):
    ctx.log.info("copied", count=3, marker=ObjectId("65f000000000000000000001"))
    ctx.logger.warning("plain line")
"""

FAILS = """
def up(ctx):
    ctx.log.warning("before the failure", step=1)
    raise RuntimeError("no")
"""


def lines(stderr: str) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in stderr.splitlines() if line.strip()]  # every line is one JSON object


def test_up_json_carries_the_migration_logs_and_a_dry_run_none(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_logs.py", LOGS)
    dry = cli(project, "dry-run", "up", "--json")
    assert dry.returncode == 0, dry.stderr
    assert "logs" not in json.loads(dry.stdout) and "copied" not in dry.stderr

    done = cli(project, "up", "--json", "--log-format", "json", "-v")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["logs"] == [
        {"migration": "0001_logs.py", "direction": "up", "attempt": 1, "level": "info", "message": "copied",
         "data": {"count": 3, "marker": {"$oid": "65f000000000000000000001"}}}
    ]
    logged = lines(done.stderr)
    plain = next(line for line in logged if line["message"] == "plain line")
    assert (plain["level"], plain["run_id"], plain["migration"], plain["attempt"]) == ("warning", report["run_id"], "0001_logs.py", 1)
    copied = next(line for line in logged if line["message"].startswith("copied"))
    assert copied["data"]["marker"] == {"$oid": "65f000000000000000000001"}
    applying = next(line for line in logged if line["message"] == "applying 0001_logs.py")
    assert (applying["run_id"], applying["migration"]) == (report["run_id"], "0001_logs.py")
    kinds = [line["event"] for line in logged if "event" in line]
    assert kinds[0] == "run_start" and kinds[-1] == "run_end" and "migration_end" in kinds


def test_a_failure_is_a_json_line_and_keeps_its_logs(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_fails.py", FAILS)
    failed = cli(project, "up", "--json", "--log-format=json")
    assert failed.returncode == 7
    error = json.loads(failed.stdout)["error"]
    assert error["details"]["logs"][0]["message"] == "before the failure"
    last = lines(failed.stderr)[-1]
    assert (last["level"], last["kind"], last["code"]) == ("error", "execution_failed", 7)


NOISY = """
import logging
import warnings


def up(ctx):
    logging.getLogger("thirdparty").warning("a library said something")
    warnings.warn("an old call", UserWarning)
"""


def test_under_log_format_json_every_stderr_line_is_json(project, cli) -> None:  # type: ignore[no-untyped-def]
    """A usage error, a library's own logger and a Python warning were plain text (the warning on two lines).
    A real process: the test runner would catch the warning itself."""
    from ..conftest import cli_process

    project.add("0001_noisy.py", NOISY)
    ran = cli_process(project, "up", "--log-format", "json")
    assert ran.returncode == 0, ran.stderr
    said = lines(ran.stderr)  # every line parses
    assert {"a library said something", "an old call"} <= {line["message"].rsplit(": ", 1)[-1].splitlines()[0] for line in said}, said
    refused = cli(project, "--log-format", "json", "bogus")
    assert refused.returncode == 6
    (line,) = lines(refused.stderr)
    assert line["level"] == "error" and "No such command 'bogus'" in line["message"] and line["code"] == 6
