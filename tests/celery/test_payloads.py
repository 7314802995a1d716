"""The task payload contract: versioned, validated, refused with exit 25 and never a value in the message."""

from __future__ import annotations

import pytest

from mongoshift.celery import VERSIONS, UpPayload
from mongoshift.celery.payloads import LanePayload, parse
from mongoshift.errors import ExitCode, TaskInvalidError

GOOD = {"v": 1, "name": "20260101000001_a.py", "group": "g1", "batch": 3, "wait_until": 1.0}


def test_a_version_1_payload_reads_back_as_it_was_written() -> None:
    assert VERSIONS == (1,)
    payload = parse(UpPayload, "mongoshift.up", GOOD)
    assert payload.model_dump() == GOOD
    assert parse(LanePayload, "mongoshift.background.lane", {"v": 1, "name": "x.py", "chain": "c"}).errors == 0


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({**GOOD, "v": 2}, "payload version 2 is not one this worker reads"),
        ({k: v for k, v in GOOD.items() if k != "v"}, "no version 'v'"),
        ({**GOOD, "v": True}, "no version 'v'"),
        ({**GOOD, "secret": "hunter2"}, "secret: extra_forbidden"),
        ({**GOOD, "batch": 0}, "batch: greater_than_equal"),
        ({**GOOD, "name": "../../etc/passwd-hunter2"}, "name: string_pattern_mismatch"),
        (["not", "a", "mapping"], "not a mapping"),
    ],
)
def test_a_payload_this_worker_cannot_read_is_refused(data: object, says: str) -> None:
    with pytest.raises(TaskInvalidError) as caught:
        parse(UpPayload, "mongoshift.up", data)
    assert says in caught.value.message
    assert "hunter2" not in caught.value.message
    assert caught.value.exit_code == ExitCode.TASK_INVALID == 25
