"""The embedded server process: URI on stdout, signals, and ``--path`` persistence.

These start their own ``python -m mongoshift.embedded`` processes (they test the
server, not MongoDB), so they run the same with or without MONGOSHIFT_TEST_URI.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from bson import Binary, Decimal128, Int64, ObjectId, Regex, Timestamp
from pymongo import AsyncMongoClient, MongoClient
from pymongo.errors import DuplicateKeyError, WriteError

pytest.importorskip("mongoeco")

CLIENT_OPTIONS: dict[str, Any] = {
    "serverSelectionTimeoutMS": 30_000,
    "uuidRepresentation": "standard",
}


class Server:
    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mongoshift.embedded", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.first_line = self.proc.stdout.readline()
        self.uri = self.first_line.strip()

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        return self.proc.returncode, err


@contextmanager
def server(*args: str) -> Iterator[Server]:
    running = Server(*args)
    try:
        assert running.uri.startswith("mongodb://"), (running.first_line, running.proc.stderr.read())
        yield running
    finally:
        if running.proc.poll() is None:
            running.proc.kill()
            running.proc.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_uri_is_the_first_stdout_line_and_a_signal_exits_0(sig: int) -> None:
    with server() as running:
        assert running.first_line.endswith("\n")
        with MongoClient(running.uri, **CLIENT_OPTIONS) as client:
            assert client.admin.command("ping")["ok"] == 1
        code, err = running.stop(sig)
    assert code == 0, err


async def test_serve_api_reports_the_uri_and_stops_on_the_event() -> None:
    from mongoshift.embedded import serve

    stop = asyncio.Event()
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve("127.0.0.1", 0, None, on_ready=ready.set_result, stop=stop))
    uri = await asyncio.wait_for(ready, 30)
    assert uri.startswith("mongodb://127.0.0.1:")
    async with AsyncMongoClient(uri, **CLIENT_OPTIONS) as client:
        assert (await client.admin.command("ping"))["ok"] == 1
    stop.set()
    await asyncio.wait_for(task, 30)


def test_embedded_imports_without_mongoeco_and_says_what_to_install() -> None:
    code = (
        "import asyncio, sys\n"
        "sys.modules['mongoeco'] = None\n"
        "import mongoshift.embedded, mongoshift.embedded.__main__\n"
        "try:\n"
        "    mongoshift.embedded.run(port=0)\n"
        "except mongoshift.embedded.EmbeddedServerUnavailable as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "install mongoshift[embedded]" in result.stdout


SAMPLE: dict[str, Any] = {
    "_id": ObjectId("65a1b2c3d4e5f60718293a4b"),
    "int64": Int64(5),
    "big": Int64(2**40),
    "int32": 7,
    "double": 7.0,
    "decimal": Decimal128("1234.5600"),
    "when": datetime.datetime(2024, 2, 29, 23, 59, 58, 123000),
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "binary": Binary(b"\x00\x01\x02", 128),
    "regex": Regex("^ab", "i"),
    "ts": Timestamp(1_700_000_000, 3),
    "nested": {"list": [1, Int64(2), [3.5, None, True]], "email": "x@example.com"},
}


def _types(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _types(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_types(item) for item in value]
    return type(value).__name__


def _write_sample(uri: str) -> None:
    with MongoClient(uri, **CLIENT_OPTIONS) as client:
        db = client.persist
        db.create_collection(
            "people", validator={"$jsonSchema": {"bsonType": "object", "required": ["email"]}}
        )
        db.people.create_index("email", unique=True, name="email_unique")
        db.people.create_index(
            [("age", 1), ("email", -1)], name="age_email", partialFilterExpression={"age": {"$gt": 17}}
        )
        db.people.insert_many([{"_id": i, "email": f"p{i}@example.com", "age": 10 + i} for i in range(20)])
        db.types.insert_one(SAMPLE)
        db.empty.insert_one({"_id": 0})
        db.empty.delete_many({})


def _check_sample(uri: str) -> None:
    with MongoClient(uri, **CLIENT_OPTIONS) as client:
        db = client.persist
        assert sorted(db.list_collection_names()) == ["empty", "people", "types"]
        restored = db.types.find_one({"_id": SAMPLE["_id"]})
        assert restored == SAMPLE
        assert _types(restored) == _types(SAMPLE)
        assert db.people.count_documents({}) == 20
        indexes = db.people.index_information()
        assert indexes["email_unique"]["unique"] is True
        assert indexes["email_unique"]["key"] == [("email", 1)]
        assert indexes["age_email"]["key"] == [("age", 1), ("email", -1)]
        assert indexes["age_email"]["partialFilterExpression"] == {"age": {"$gt": 17}}
        with pytest.raises(DuplicateKeyError):
            db.people.insert_one({"_id": 100, "email": "p1@example.com"})
        [info] = db.list_collections(filter={"name": "people"})
        assert info["options"]["validator"] == {
            "$jsonSchema": {"bsonType": "object", "required": ["email"]}
        }
        with pytest.raises(WriteError) as invalid:
            db.people.insert_one({"_id": 101})
        assert invalid.value.code == 121


def test_path_persists_data_types_indexes_and_validators_across_a_clean_restart(tmp_path: Path) -> None:
    snapshot = tmp_path / "data" / "embedded.bson"
    snapshot.parent.mkdir()  # a missing folder is refused at start (test_path.py)
    with server("--path", str(snapshot)) as first:
        _write_sample(first.uri)
        code, err = first.stop()
    assert code == 0, err
    assert snapshot.is_file()
    assert [p.name for p in snapshot.parent.iterdir()] == ["embedded.bson"]  # no temp file left

    with server("--path", str(snapshot)) as second:
        _check_sample(second.uri)
        with MongoClient(second.uri, **CLIENT_OPTIONS) as client:
            client.persist.people.insert_one({"_id": 200, "email": "lost@example.com"})
        # A crash loses everything since the last clean shutdown.
        second.proc.send_signal(signal.SIGKILL)
        second.proc.wait()

    with server("--path", str(snapshot)) as third:
        _check_sample(third.uri)
        with MongoClient(third.uri, **CLIENT_OPTIONS) as client:
            assert client.persist.people.find_one({"_id": 200}) is None
        code, err = third.stop()
    assert code == 0, err


def test_unreadable_snapshot_refuses_to_start_and_is_left_untouched(tmp_path: Path) -> None:
    snapshot = tmp_path / "broken.bson"
    snapshot.write_bytes(b"not a snapshot at all")
    running = Server("--path", str(snapshot))
    code, err = running.stop()
    assert running.uri == ""
    assert code not in (0, None)
    assert "snapshot" in err
    assert snapshot.read_bytes() == b"not a snapshot at all"


def test_truncated_snapshot_refuses_to_start(tmp_path: Path) -> None:
    snapshot = tmp_path / "snap.bson"
    with server("--path", str(snapshot)) as first:
        with MongoClient(first.uri, **CLIENT_OPTIONS) as client:
            client.db.c.insert_many([{"i": i} for i in range(100)])
        assert first.stop()[0] == 0
    data = snapshot.read_bytes()
    snapshot.write_bytes(data[: len(data) // 2])
    running = Server("--path", str(snapshot))
    code, err = running.stop()
    assert code not in (0, None)
    assert "truncated" in err or "corrupt" in err
    assert os.path.getsize(snapshot) == len(data) // 2


@pytest.mark.parametrize("entry", ["cli", "module"])
def test_a_second_server_on_the_same_path_is_refused_and_the_first_keeps_its_data(tmp_path: Path, entry: str) -> None:
    """Two servers on one snapshot would each write theirs at shutdown, the last over the other's (mongod refuses a
    second server on one dbPath too): the second one is refused at start, before it serves anything."""
    snapshot = tmp_path / "snap.bson"
    with server("--path", str(snapshot)) as first:
        with MongoClient(first.uri, **CLIENT_OPTIONS) as client:
            client.db.c.insert_one({"_id": 1})
        command = ["-m", "mongoshift", "embedded"] if entry == "cli" else ["-m", "mongoshift.embedded"]
        second = subprocess.Popen([sys.executable, *command, "--port", "0", "--path", str(tmp_path / "." / "snap.bson")],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert second.stdout is not None
        out = second.stdout.readline()  # a refused start ends (""), one that serves prints its URI
        if out:
            second.terminate()
        _, err = second.communicate(timeout=60)
        assert second.returncode == 6 and out == "", (out, err)
        assert str(snapshot) in err and "another embedded server" in err and f"pid {first.proc.pid}" in err
        assert "Traceback" not in err
        with MongoClient(first.uri, **CLIENT_OPTIONS) as client:
            client.db.c.insert_one({"_id": 2})  # the first still serves
        code, err = first.stop()
    assert code == 0, err
    assert [p.name for p in tmp_path.iterdir()] == ["snap.bson"]  # its claim is gone with it
    with server("--path", str(snapshot)) as third:
        with MongoClient(third.uri, **CLIENT_OPTIONS) as client:
            assert [d["_id"] for d in client.db.c.find()] == [1, 2]
        third.proc.send_signal(signal.SIGKILL)  # a killed server's claim ends with its process
        third.proc.wait()
    with server("--path", str(snapshot)) as fourth:
        assert fourth.stop()[0] == 0


async def _saved_snapshot(path: Path) -> bytes:
    """A snapshot of two documents at ``path``, written by a server of this process; its bytes."""
    from mongoshift.embedded import serve

    stop = asyncio.Event()
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve("127.0.0.1", 0, path, on_ready=ready.set_result, stop=stop))
    async with AsyncMongoClient(await asyncio.wait_for(ready, 30), **CLIENT_OPTIONS) as client:
        await client.db.c.insert_many([{"_id": 1}, {"_id": 2}])
    stop.set()
    await asyncio.wait_for(task, 30)
    return path.read_bytes()  # noqa: ASYNC240 - a test's small file, once


async def test_a_save_cut_short_by_a_crash_leaves_no_file_behind_at_the_next_start(tmp_path: Path) -> None:
    """A kill -9 while the snapshot was written left its temporary file (as large as a snapshot), and every such crash
    another: the next server of that snapshot removes them once it holds the snapshot, and nothing else."""
    from mongoshift.embedded import serve

    path = tmp_path / "snap.bson"
    data = await _saved_snapshot(path)
    cut_short = [tmp_path / ".snap.bson.ab_c1234.tmp", tmp_path / ".snap.bson.zz9y8x7w.tmp"]
    others = [tmp_path / ".snap.bson.other.ab_c1234.tmp", tmp_path / "notes.tmp", tmp_path / ".snap.bson.short.tmp"]
    for leftover in cut_short + others:
        leftover.write_bytes(data[:10])
    stop = asyncio.Event()
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(serve("127.0.0.1", 0, path, on_ready=ready.set_result, stop=stop))
    async with AsyncMongoClient(await asyncio.wait_for(ready, 30), **CLIENT_OPTIONS) as client:
        assert [d["_id"] async for d in client.db.c.find()] == [1, 2]
    assert not any(leftover.exists() for leftover in cut_short)
    assert all(other.exists() for other in others)
    stop.set()
    await asyncio.wait_for(serving, 30)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["snap.bson", *(o.name for o in others)])  # noqa: ASYNC240


async def test_a_stop_while_the_snapshot_loads_ends_the_load_and_serves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM while a large snapshot loaded (about 25 s for 100,000 documents) waited for the whole load, then printed
    the URI as if the server were up, and wrote the snapshot back. The load ends at once: no URI, the file left as it was."""
    from mongoshift.embedded import serve, snapshot

    path = tmp_path / "snap.bson"
    data = await _saved_snapshot(path)
    here = asyncio.get_running_loop()
    loading = asyncio.Event()

    async def stuck(client: Any, spec: Any, batch: Any) -> int:  # on the engine's loop: a load that would go on for an hour
        here.call_soon_threadsafe(loading.set)
        await asyncio.sleep(3600)
        return 0

    monkeypatch.setattr(snapshot, "_insert", stuck)
    stop, ready = asyncio.Event(), []
    serving = asyncio.create_task(serve("127.0.0.1", 0, path, on_ready=ready.append, stop=stop))
    await asyncio.wait_for(loading.wait(), 60)
    stop.set()
    await asyncio.wait_for(serving, 60)  # without the fix: the hour-long load
    assert ready == [] and path.read_bytes() == data
    assert [p.name for p in tmp_path.iterdir()] == ["snap.bson"]  # noqa: ASYNC240 - a test's folder, once


async def test_a_stop_before_the_snapshot_is_loaded_serves_nothing_and_writes_nothing(tmp_path: Path) -> None:
    from mongoshift.embedded import serve

    path = tmp_path / "snap.bson"
    data = await _saved_snapshot(path)
    stop, ready = asyncio.Event(), []
    stop.set()
    await asyncio.wait_for(serve("127.0.0.1", 0, path, on_ready=ready.append, stop=stop), 60)
    assert ready == [] and path.read_bytes() == data  # no URI announced for a server that is stopping; not rewritten


async def test_a_long_load_says_how_far_it_has_come(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A snapshot of 60,000 documents loaded for over a minute on a busy machine with nothing printed before the URI:
    a line every 10 s says how many documents are in and how much of the file is read (here every batch of 1,000)."""
    from mongoshift.embedded import serve, snapshot

    path = tmp_path / "snap.bson"
    stop = asyncio.Event()
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve("127.0.0.1", 0, path, on_ready=ready.set_result, stop=stop))
    async with AsyncMongoClient(await asyncio.wait_for(ready, 30), **CLIENT_OPTIONS) as client:
        await client.db.c.insert_many([{"_id": i, "s": "x" * 20} for i in range(2_500)])
    stop.set()
    await asyncio.wait_for(task, 60)

    monkeypatch.setattr(snapshot, "_PROGRESS_EVERY", 0.0)
    caplog.set_level(logging.INFO, logger="mongoshift.embedded.snapshot")
    stop = asyncio.Event()
    ready = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve("127.0.0.1", 0, path, on_ready=ready.set_result, stop=stop))
    await asyncio.wait_for(ready, 60)
    stop.set()
    await asyncio.wait_for(task, 60)
    lines = [record.getMessage() for record in caplog.records if record.getMessage().startswith("loading snapshot")]
    assert [line.split(": ", 1)[1].split(" documents")[0] for line in lines] == ["1000", "2000"]
    percents = [int(line.rsplit(", ", 1)[1].split("%")[0]) for line in lines]
    assert 0 < percents[0] < percents[1] < 100
