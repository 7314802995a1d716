"""``mongoshift embedded --path``: an unusable location or a corrupt snapshot fails at start, clearly.

These run ``mongoshift embedded`` processes (they test the command, not MongoDB), so they
run the same with or without MONGOSHIFT_TEST_URI.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import bson
import pytest

pytest.importorskip("mongoeco")


def embedded(path: Path, *, entry: str = "cli") -> subprocess.CompletedProcess[str]:
    """Start the server on a free port; a start that works is stopped at once by the timeout guard."""
    command = ["-m", "mongoshift", "embedded"] if entry == "cli" else ["-m", "mongoshift.embedded"]
    proc = subprocess.Popen(
        [sys.executable, *command, "--port", "0", "--path", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # it started: the check did not refuse the path
        proc.terminate()
        out, err = proc.communicate(timeout=60)
        return subprocess.CompletedProcess(proc.args, -1, out, err)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def read_only_folder(tmp_path: Path) -> Path:
    """A folder this process cannot create files in (root ignores permissions: use a kernel folder)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    candidates = [folder, Path("/sys")]
    for candidate in candidates:
        try:
            fd, name = tempfile.mkstemp(dir=candidate)
        except OSError:
            return candidate
        os.close(fd)
        os.unlink(name)
    pytest.skip("no folder here refuses writes to this user")


@pytest.mark.parametrize("entry", ["cli", "module"])
def test_a_missing_folder_fails_at_start_with_exit_6(tmp_path: Path, entry: str) -> None:
    target = tmp_path / "no" / "such" / "snap.bson"
    result = embedded(target, entry=entry)
    assert result.returncode == 6, result.stderr
    assert result.stdout == ""  # no URI: it never served
    assert str(target.parent) in result.stderr and "does not exist" in result.stderr
    assert "Traceback" not in result.stderr
    assert not target.parent.exists()


@pytest.mark.parametrize("entry", ["cli", "module"])
def test_a_read_only_location_fails_at_start_with_exit_44(tmp_path: Path, entry: str) -> None:
    """The system refuses the folder (exit 44, io_failed): not a bad argument, as a missing folder is."""
    target = read_only_folder(tmp_path) / "snap.bson"
    result = embedded(target, entry=entry)
    assert result.returncode == 44, result.stderr
    assert str(target.parent) in result.stderr and "cannot write" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("entry", ["cli", "module"])
def test_a_port_in_use_fails_with_exit_45_naming_host_and_port(entry: str) -> None:
    command = ["-m", "mongoshift", "embedded"] if entry == "cli" else ["-m", "mongoshift.embedded"]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, *command, "--host", "127.0.0.1", "--port", str(port)], capture_output=True, text=True, timeout=120
        )
    assert result.returncode == 45, result.stderr
    assert f"cannot listen on 127.0.0.1 port {port}: the port is taken" in result.stderr and "--port" in result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr


def test_a_folder_as_the_snapshot_path_fails_at_start(tmp_path: Path) -> None:
    result = embedded(tmp_path)
    assert result.returncode == 6, result.stderr
    assert str(tmp_path) in result.stderr and "is a folder" in result.stderr


def _snapshot(*records: dict) -> bytes:  # type: ignore[type-arg]
    header = {"mongoshift": "embedded-snapshot", "format": 1, "mongoeco": "4.11.0"}
    return b"".join(bson.encode(r) for r in (header, *records))


@pytest.mark.parametrize(
    "records",
    [
        ({"collection": {"name": "c"}}, {"end": True}),  # a collection record without its database
        ({"collection": {"db": "d", "name": "c", "type": "collection", "options": {}, "indexes": [{"key": 5}]}}, {"end": True}),
        ({"collection": {"db": "d", "name": "c", "type": "collection", "options": {}, "indexes": []}}, {"d": 7}, {"end": True}),
    ],
)
@pytest.mark.parametrize("entry", ["cli", "module"])
def test_a_corrupt_snapshot_fails_with_exit_6_naming_the_file_and_is_kept(tmp_path: Path, records: tuple, entry: str) -> None:  # type: ignore[type-arg]
    target = tmp_path / "snap.bson"
    data = _snapshot(*records)
    target.write_bytes(data)
    result = embedded(target, entry=entry)
    assert result.returncode == 6, result.stderr
    assert str(target) in result.stderr and "corrupt" in result.stderr
    assert "Traceback" not in result.stderr
    assert target.read_bytes() == data
    assert [p.name for p in tmp_path.iterdir()] == ["snap.bson"]


def test_an_unreadable_snapshot_from_the_cli_is_exit_6(tmp_path: Path) -> None:
    target = tmp_path / "snap.bson"
    target.write_bytes(b"not a snapshot at all")
    result = embedded(target)
    assert result.returncode == 6, result.stderr
    assert str(target) in result.stderr and "Traceback" not in result.stderr
    assert "is not a mongoshift embedded snapshot" in result.stderr  # it said "is truncated"
    assert target.read_bytes() == b"not a snapshot at all"
