"""The task payload contract: versioned, validated, refused with exit 25 and never a value in the message."""

from __future__ import annotations

import pytest

from mongoshift.celery import VERSIONS, UpPayload
from mongoshift.celery.payloads import LanePayload, parse
from mongoshift.errors import ExitCode, TaskInvalidError

GOOD = {"v": 1, "name": "20260101000001_a.py", "group": "g1", "batch": 3, "wait_until": 1.0}
CHECKSUM = "ab" * 32
GOOD_2 = {**GOOD, "v": 2, "direction": "down", "checksum": CHECKSUM, "ordered": False}


def test_a_version_1_payload_reads_back_as_it_was_written() -> None:
    assert VERSIONS == (1, 2)
    payload = parse(UpPayload, "mongoshift.up", GOOD)
    assert {k: v for k, v in payload.model_dump().items() if k in GOOD} == GOOD
    assert (payload.direction, payload.checksum, payload.ordered) == ("up", None, True)  # a version 1 line task, as before
    assert parse(LanePayload, "mongoshift.background.lanes.lane", {"v": 1, "name": "x.py", "chain": "c"}).errors == 0


def test_a_version_2_payload_carries_the_files_checksum_and_its_direction() -> None:
    payload = parse(UpPayload, "mongoshift.down", GOOD_2)
    assert payload.model_dump() == GOOD_2


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({**GOOD, "v": 3}, "payload version 3 is not one this worker reads"),
        ({**GOOD, "v": 2}, "payload: checksum_missing"),
        ({**GOOD, "direction": "down"}, "payload: version_1_has_no_such_field"),
        ({**GOOD_2, "direction": "sideways"}, "direction: literal_error"),
        ({**GOOD_2, "checksum": "hunter2"}, "checksum: string_pattern_mismatch"),
        ({k: v for k, v in GOOD.items() if k != "v"}, "no version 'v'"),
        # a version of another type is there, of the wrong type: it was said to be missing ("has no version 'v'")
        ({**GOOD, "v": True}, "the payload's version 'v' is a bool, not a whole number"),
        ({**GOOD, "v": "hunter2"}, "the payload's version 'v' is a str, not a whole number"),
        ({**GOOD, "secret": "hunter2"}, "secret: extra_forbidden"),
        ({**GOOD, "batch": 0}, "batch: greater_than_equal"),
        ({**GOOD, "name": "../../etc/passwd-hunter2"}, "name: string_pattern_mismatch"),
        (["not", "a", "mapping"], "not a mapping"),
        # Another type is refused, never converted: "3" is no batch, 0 is no "ordered" (it read as False: a file
        # queued on its own instead of a line), True no count, and a deadline must be a finite time.
        ({**GOOD, "batch": "3"}, "batch: int_type"),
        ({**GOOD, "batch": 3.0}, "batch: int_type"),
        ({**GOOD_2, "ordered": 0}, "ordered: bool_type"),
        ({**GOOD_2, "ordered": "false"}, "ordered: bool_type"),
        ({**GOOD, "group": 5}, "group: string_type"),
        ({**GOOD, "wait_until": float("inf")}, "wait_until: finite_number"),
        ({**GOOD, "wait_until": "1e12"}, "wait_until: float_type"),
    ],
)
def test_a_payload_this_worker_cannot_read_is_refused(data: object, says: str) -> None:
    with pytest.raises(TaskInvalidError) as caught:
        parse(UpPayload, "mongoshift.up", data)
    assert says in caught.value.message
    assert "hunter2" not in caught.value.message
    assert caught.value.exit_code == ExitCode.TASK_INVALID == 25


def test_a_lane_payload_counts_its_failures_with_an_integer() -> None:
    for errors in (True, "2", 1.0):
        with pytest.raises(TaskInvalidError, match="errors: int_type"):
            parse(LanePayload, "mongoshift.background.lanes.lane", {"v": 1, "name": "x.py", "chain": "c", "errors": errors})


@pytest.mark.parametrize(
    ("task", "args", "kwargs", "says"),
    [
        ("up", (), {}, "missing a required argument: 'payload'"),
        ("down", (GOOD_2, GOOD_2), {}, "too many positional arguments"),
        ("up", (GOOD,), {"secret": "hunter2"}, "unexpected keyword argument 'secret'"),
        ("background.lane", (), {"payload": {"v": 1}, "extra": "hunter2"}, "unexpected keyword argument 'extra'"),
        ("audit", ("hunter2",), {}, "too many positional arguments"),
        # Read for its truth, the text "no" would be a destructive converge, and "false" a verify that rewrites.
        ("converge", (), {"yes": "no"}, "yes must be true or false, not a str"),
        ("background.verify", (), {"reopen": "false"}, "reopen must be true or false, not a str"),
    ],
)
def test_a_message_whose_arguments_do_not_fit_its_task_is_refused_as_an_invalid_payload(
    task: str, args: tuple[object, ...], kwargs: dict[str, object], says: str
) -> None:
    from celery import Celery

    from mongoshift.celery import register

    app = Celery("payloads", broker="memory://", backend="cache+memory://")
    register(app, settings=lambda: pytest.fail("a refused message reads no settings"), allow={"up", "down", "converge_destructive"})
    result = app.tasks[f"mongoshift.{task}"].apply(args=args, kwargs=kwargs)
    assert isinstance(result.result, TaskInvalidError), result.result
    assert says in result.result.message
    assert "hunter2" not in result.result.message
    assert result.result.exit_code == ExitCode.TASK_INVALID
