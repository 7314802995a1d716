"""Health signals: the replication-lag decisions on recorded-shaped replies, user signals, the wait loop."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import Int64
from bson.timestamp import Timestamp
from pymongo.errors import OperationFailure

from mongoshift.background.lanes.health import (
    CallableSignal,
    HealthSignal,
    ReplicationLag,
    excluded_members,
    max_secondary_lag,
    wait_while_unhealthy,
)

NOW = datetime(2024, 5, 2, 10, 0, 0)  # pymongo decodes dates as naive UTC
STATE_STR = {1: "PRIMARY", 2: "SECONDARY", 3: "RECOVERING", 5: "STARTUP2", 7: "ARBITER", 8: "(not reachable/healthy)"}


def member(_id: int, state: int, lag_s: float = 0.0, *, self_: bool = False) -> dict[str, Any]:
    optime = NOW - timedelta(seconds=lag_s)
    doc: dict[str, Any] = {
        "_id": _id,
        "name": f"db{_id}.example.net:27017",
        "health": 1.0,
        "state": state,
        "stateStr": STATE_STR[state],
        "uptime": 86_400,
        "optime": {"ts": Timestamp(int(optime.timestamp()), 1), "t": Int64(7)},
        "optimeDate": optime,
        "lastHeartbeat": NOW,
        "syncSourceHost": "" if state == 1 else "db0.example.net:27017",
        "configVersion": 5,
        "configTerm": 7,
    }
    if self_:
        doc["self"] = True
    if state == 7:  # arbiters hold no data: no optimeDate worth comparing
        doc.pop("optime")
        doc.pop("optimeDate")
    return doc


def status(*members: dict[str, Any]) -> dict[str, Any]:
    return {
        "set": "rs0",
        "date": NOW,
        "myState": 1,
        "term": Int64(7),
        "heartbeatIntervalMillis": Int64(2000),
        "majorityVoteCount": 2,
        "members": list(members),
        "ok": 1.0,
        "operationTime": Timestamp(int(NOW.timestamp()), 1),
    }


def config_member(_id: int, *, hidden: bool = False, delay: int = 0) -> dict[str, Any]:
    return {
        "_id": _id,
        "host": f"db{_id}.example.net:27017",
        "arbiterOnly": False,
        "buildIndexes": True,
        "hidden": hidden,
        "priority": 0.0 if hidden or delay else 1.0,
        "tags": {},
        "secondaryDelaySecs": Int64(delay),
        "votes": 1,
    }


def config(*members: dict[str, Any]) -> dict[str, Any]:
    return {
        "config": {"_id": "rs0", "version": 5, "term": 7, "protocolVersion": Int64(1), "members": list(members), "settings": {"chainingAllowed": True}},
        "ok": 1.0,
    }


class FakeAdmin:
    """An ``admin_command``: answers from documents (or raises), counting the calls."""

    def __init__(self, status: Any, config: Any = None) -> None:
        self.status = status
        self.config = config if config is not None else OperationFailure("no config here", 13)
        self.calls: list[str] = []

    async def __call__(self, command: dict[str, Any]) -> dict[str, Any]:
        name = next(iter(command))
        self.calls.append(name)
        answer = self.status if name == "replSetGetStatus" else self.config
        if isinstance(answer, Exception):
            raise answer
        return answer

    def count(self, name: str) -> int:
        return self.calls.count(name)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def signal(admin: FakeAdmin, clock: Clock | None = None, **options: Any) -> ReplicationLag:
    return ReplicationLag(admin, now=clock or Clock(), **options)


# -- replication lag ---------------------------------------------------------------------------------


async def test_a_secondary_lagging_more_than_the_limit_asks_for_one_second_waits() -> None:
    lag = signal(FakeAdmin(status(member(0, 1, self_=True), member(1, 2, 0.5), member(2, 2, 12.0))))
    assert isinstance(lag, HealthSignal)
    assert await lag.wait_ms() == 1000
    assert lag.last_lag_ms == pytest.approx(12_000)
    assert lag.lagging_member == "db2.example.net:27017"


async def test_a_lag_under_the_limit_goes_on() -> None:
    lag = signal(FakeAdmin(status(member(0, 1, self_=True), member(1, 2, 0.5), member(2, 2, 9.9))))
    assert await lag.wait_ms() == 0
    assert lag.last_lag_ms == pytest.approx(9_900)
    tight = signal(FakeAdmin(status(member(0, 1, self_=True), member(1, 2, 0.5))), max_lag_ms=200)
    assert await tight.wait_ms() == 1000


async def test_hidden_and_delayed_members_are_left_out() -> None:
    admin = FakeAdmin(
        status(member(0, 1, self_=True), member(1, 2, 1.0), member(2, 2, 3600.0), member(3, 2, 60.0)),
        config(config_member(0), config_member(1), config_member(2, delay=3600), config_member(3, hidden=True)),
    )
    lag = signal(admin)
    assert await lag.wait_ms() == 0
    assert lag.last_lag_ms == pytest.approx(1_000)
    assert admin.calls == ["replSetGetStatus", "replSetGetConfig"]


def test_the_excluded_members_of_a_config() -> None:
    legacy = {"_id": 4, "host": "db4.example.net:27017", "hidden": False, "slaveDelay": 120, "priority": 0}
    doc = config(config_member(0), config_member(1, hidden=True), config_member(2, delay=60), config_member(3), legacy)["config"]
    assert excluded_members(doc) == {1, 2, 4}


async def test_without_the_config_no_one_is_left_out() -> None:
    admin = FakeAdmin(status(member(0, 1, self_=True), member(3, 2, 60.0)), OperationFailure("not authorized", 13))
    lag = signal(admin)
    assert await lag.wait_ms() == 1000
    assert lag.enabled  # a config that cannot be read does not turn the signal off


async def test_members_that_are_not_secondary_are_ignored() -> None:
    lag = signal(
        FakeAdmin(
            status(
                member(0, 1, self_=True),
                member(1, 2, 2.0),
                member(2, 3, 900.0),  # RECOVERING
                member(3, 5, 900.0),  # STARTUP2 (initial sync)
                member(4, 7),  # ARBITER
                member(5, 8, 900.0),  # DOWN
            )
        )
    )
    assert await lag.wait_ms() == 0
    assert lag.last_lag_ms == pytest.approx(2_000)


def test_lag_without_a_primary_or_without_secondaries() -> None:
    assert max_secondary_lag(status(member(1, 2, 0.0), member(2, 2, 30.0))) == (pytest.approx(30_000), "db2.example.net:27017")
    assert max_secondary_lag(status(member(0, 1, self_=True))) == (None, None)
    assert max_secondary_lag(status(member(0, 1), member(1, 2, 5.0)), exclude=frozenset({1})) == (None, None)


async def test_the_status_is_read_at_most_every_five_seconds() -> None:
    admin = FakeAdmin(status(member(0, 1, self_=True), member(1, 2, 20.0)), config(config_member(0), config_member(1)))
    clock = Clock()
    lag = signal(admin, clock)
    for _ in range(10):  # 0 .. 4.5 s
        assert await lag.wait_ms() == 1000
        clock.t += 0.5
    assert admin.count("replSetGetStatus") == 1
    admin.status = status(member(0, 1, self_=True), member(1, 2, 0.2))
    assert await lag.wait_ms() == 0  # 5 s later: read again, caught up
    assert admin.count("replSetGetStatus") == 2
    for _ in range(30):
        clock.t += 2.5
        await lag.wait_ms()
    assert admin.count("replSetGetStatus") == 2 + 15
    assert admin.count("replSetGetConfig") == 2  # at most every 60 s: at 0 s and at 60 s


async def test_unauthorized_warns_once_and_never_waits_again(caplog: pytest.LogCaptureFixture) -> None:
    refusal = {"ok": 0.0, "code": 13, "codeName": "Unauthorized"}
    admin = FakeAdmin(OperationFailure("not authorized on admin to execute command { replSetGetStatus: 1 }", 13, refusal))
    clock = Clock()
    lag = signal(admin, clock)
    with caplog.at_level(logging.DEBUG, logger="mongoshift.background"):
        for _ in range(5):
            assert await lag.wait_ms() == 0
            clock.t += 10
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and warnings[0].name == "mongoshift.background"
    assert "not authorized" in warnings[0].getMessage()
    assert admin.calls == ["replSetGetStatus"] and not lag.enabled


@pytest.mark.parametrize(
    "error",
    [
        OperationFailure("not running with --replSet", 76, {"ok": 0.0, "errmsg": "not running with --replSet", "code": 76, "codeName": "NoReplicationEnabled"}),
        OperationFailure("no such command: 'replSetGetStatus'", 59),
        OperationFailure("replSetGetStatus may only be run against the admin database.", 20),
        OperationFailure("not running with --replSet"),  # no code at all
        {"ok": 0.0, "errmsg": "not running with --replSet", "code": 76, "codeName": "NoReplicationEnabled"},  # a raw reply
    ],
)
async def test_a_standalone_server_turns_the_signal_off_quietly(error: Any, caplog: pytest.LogCaptureFixture) -> None:
    admin = FakeAdmin(error)
    clock = Clock()
    lag = signal(admin, clock)
    with caplog.at_level(logging.DEBUG, logger="mongoshift.background"):
        for _ in range(3):
            assert await lag.wait_ms() == 0
            clock.t += 10
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert admin.count("replSetGetStatus") == 1 and not lag.enabled


async def test_other_errors_go_on_for_now_and_are_tried_again(caplog: pytest.LogCaptureFixture) -> None:
    admin = FakeAdmin(OperationFailure("The server is in quiesce mode and will shut down", 91))
    clock = Clock()
    lag = signal(admin, clock)
    with caplog.at_level(logging.DEBUG, logger="mongoshift.background"):
        assert await lag.wait_ms() == 0
    assert lag.enabled and lag.last_lag_ms is None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    admin.status = status(member(0, 1, self_=True), member(1, 2, 15.0))
    clock.t += 5
    assert await lag.wait_ms() == 1000


@pytest.mark.parametrize("off", [None, False])
async def test_no_limit_never_asks_the_server(off: Any) -> None:
    admin = FakeAdmin(status(member(0, 1, self_=True), member(1, 2, 3600.0)))
    lag = signal(admin, max_lag_ms=off)
    assert await lag.wait_ms() == 0
    assert admin.calls == [] and not lag.enabled


async def test_timezone_aware_dates() -> None:

    primary, secondary = member(0, 1), member(1, 2, 11.0)
    primary["optimeDate"] = primary["optimeDate"].replace(tzinfo=UTC)
    secondary["optimeDate"] = secondary["optimeDate"].replace(tzinfo=UTC)
    assert max_secondary_lag(status(primary, secondary))[0] == pytest.approx(11_000)


# -- user signals --------------------------------------------------------------------------------------


async def test_a_sync_function_as_a_signal() -> None:
    answers = iter([250, 0, None, False, True, -5, 12.5])
    user = CallableSignal(lambda: next(answers), name="app-latency")
    assert [await user.wait_ms() for _ in range(7)] == [250, 0, 0, 0, 1000, 0, 12.5]
    assert isinstance(user, HealthSignal)


async def test_an_async_function_as_a_signal() -> None:
    async def p99_latency_over_budget() -> float | None:
        return 300.0

    user = CallableSignal(p99_latency_over_budget)
    assert await user.wait_ms() == 300
    assert user.name == "p99_latency_over_budget"


async def test_a_broken_signal_goes_on_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> float:
        raise RuntimeError("metrics endpoint down")

    user = CallableSignal(broken)
    wrong = CallableSignal(lambda: "busy")
    with caplog.at_level(logging.DEBUG, logger="mongoshift.background"):
        for _ in range(3):
            assert await user.wait_ms() == 0
            assert await wrong.wait_ms() == 0
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 2


# -- the wait loop ---------------------------------------------------------------------------------------


class Sleeper:
    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock
        self.slept: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.slept.append(seconds)
        if self.clock is not None:
            self.clock.t = round(self.clock.t + seconds, 6)  # no float drift across a refresh boundary


class Scripted:
    def __init__(self, *answers: float) -> None:
        self.answers = list(answers)
        self.asked = 0

    async def wait_ms(self) -> float:
        self.asked += 1
        return self.answers.pop(0) if self.answers else 0.0


async def test_waits_the_largest_wait_until_every_signal_says_go() -> None:
    sleep = Sleeper()
    a, b = Scripted(1000, 1000), Scripted(300, 0, 200)
    waited = await wait_while_unhealthy([a, b], cancelled=lambda: False, sleep=sleep)
    assert waited == pytest.approx(2200)  # 1000, 1000, 200, then both say 0
    assert sum(sleep.slept) == pytest.approx(2.2) and max(sleep.slept) <= 0.1 + 1e-9
    assert a.asked == b.asked == 4


async def test_healthy_signals_do_not_sleep() -> None:
    sleep = Sleeper()
    assert await wait_while_unhealthy([Scripted(), CallableSignal(lambda: None)], cancelled=lambda: False, sleep=sleep) == 0
    assert await wait_while_unhealthy([], cancelled=lambda: False, sleep=sleep) == 0
    assert sleep.slept == []


async def test_cancellation_stops_the_wait_within_a_chunk() -> None:
    sleep = Sleeper()
    always = Scripted(*[60_000] * 100)
    waited = await wait_while_unhealthy([always], cancelled=lambda: len(sleep.slept) >= 3, sleep=sleep)
    assert len(sleep.slept) == 3 and waited == pytest.approx(300)
    assert await wait_while_unhealthy([always], cancelled=lambda: True, sleep=sleep) == 0


async def test_max_wait_caps_the_total() -> None:
    sleep = Sleeper()
    waited = await wait_while_unhealthy([Scripted(*[1000] * 100)], cancelled=lambda: False, sleep=sleep, max_wait_s=2.5)
    assert waited == pytest.approx(2500) and sum(sleep.slept) == pytest.approx(2.5)


async def test_the_lag_signal_in_the_loop_waits_until_the_secondary_catches_up() -> None:
    clock = Clock()
    admin = FakeAdmin(status(member(0, 1, self_=True), member(1, 2, 30.0)))
    lag = signal(admin, clock)

    class CatchingUp(Sleeper):
        async def __call__(self, seconds: float) -> None:
            await super().__call__(seconds)
            if clock.t >= 1007:  # the secondary has caught up 7 s later
                admin.status = status(member(0, 1, self_=True), member(1, 2, 0.1))

    waited = await wait_while_unhealthy([lag], cancelled=lambda: False, sleep=CatchingUp(clock))
    assert waited == pytest.approx(10_000)  # noticed at the next read, 10 s after the first
    assert admin.count("replSetGetStatus") == 3


# -- a real replica set --------------------------------------------------------------------------------


@pytest.mark.real_mongodb
async def test_reads_the_lag_of_a_real_replica_set(client: Any) -> None:
    lag = ReplicationLag(client.admin.command)
    wait = await lag.wait_ms()
    assert wait >= 0
    assert lag.enabled
    assert lag.last_lag_ms is None or lag.last_lag_ms >= 0
