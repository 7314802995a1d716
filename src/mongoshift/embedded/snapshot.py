"""Persistence for ``--path``: a BSON snapshot loaded at start and written at clean shutdown.

mongoeco's own SQLite engine is far too slow for mongoshift (about 30 updates/s,
every update scans and decodes the collection), so the embedded server always
runs the in-memory engine and persists it as a whole:

* at start, :func:`load` restores the snapshot file (if it exists) before the
  server accepts connections;
* at a clean shutdown (SIGINT/SIGTERM, or the ``stop`` event of
  :func:`mongoshift.embedded.server.serve`), :func:`save` writes it again,
  after the listener is closed, so no write can land half-way.

**A crash loses everything written since the last clean shutdown**: ``kill -9``,
an out-of-memory kill or a power cut leave the previous snapshot as it was.
The write is atomic (temporary file in the same directory, ``fsync``, then
``os.replace``), so the file is always either the old snapshot or the new one,
never a torn mix.

The file is a sequence of BSON documents, encoded exactly as the wire protocol
encodes them, so every BSON type survives as it was (Int64, Decimal128,
datetimes, ObjectId, Binary/UUID, Regex, Timestamp...)::

    {"mongoshift": "embedded-snapshot", "format": 1, "mongoeco": "4.11.0", "created": <date>}
    {"collection": {"db", "name", "type", "options", "indexes"}}   # one per collection or view
    {"d": <document>}                                                # its documents follow it
    ...
    {"end": true, "collections": <n>, "documents": <n>}

Collection options (validator, validationLevel/Action, capped, collation, views'
viewOn/pipeline...) are restored through the ``create`` command and indexes
(unique, partial, sparse, TTL, collation...) through ``createIndexes``, from what
``listCollections`` and ``listIndexes`` report. Indexes are created *before* the
documents are inserted: mongoeco 4.11 builds a unique index over existing
documents pairwise (O(N²), minutes for a few thousand documents), while inserting
under a single-field unique index is cheap. Documents are restored without
re-running validators (they passed when written). ``system.*`` collections are
not saved.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

log = logging.getLogger(__name__)

MAGIC = "embedded-snapshot"
FORMAT = 1
_RESTORE_BATCH = 1_000
#: Seconds between two progress lines of a load (100,000 documents take some 25 s on a quiet machine, minutes on a
#: busy one, and nothing else is printed before the URI).
_PROGRESS_EVERY = 10.0


class SnapshotError(Exception):
    """The snapshot file cannot be read (not a snapshot, unknown format, truncated or corrupt),
    or its location cannot be used; the message names the file."""


class SnapshotIOError(SnapshotError):
    """The system refused to read or write the snapshot or its folder (read-only, no permission,
    disk full): not a bad file, so it is told apart (``path`` and the system's ``reason``)."""

    def __init__(self, message: str, path: Path, reason: str) -> None:
        super().__init__(message)
        self.path = path
        self.reason = reason


def check_path(path: Path) -> None:
    """Fail at start, not at shutdown: the snapshot's folder must exist and take a new file.

    A missing folder or a read-only location would otherwise only show when the server
    stops, and the whole session's data would be lost with it. Writing is tested by
    creating (and removing) a file next to the snapshot, as :func:`save` will.
    """
    path = Path(path)
    if path.is_dir():
        raise SnapshotError(f"{path} is a folder: --path names the snapshot file")
    folder = path.parent
    if not folder.exists():
        raise SnapshotError(f"cannot use {path}: the folder {folder} does not exist")
    if not folder.is_dir():
        raise SnapshotError(f"cannot use {path}: {folder} is not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".check", dir=folder)
    except OSError as error:
        reason = error.strerror or str(error)
        raise SnapshotIOError(f"cannot write in {folder} (for {path}): {reason}", folder, reason) from None
    os.close(fd)
    os.unlink(probe)
    if path.exists():
        try:
            with path.open("rb"):
                pass
        except OSError as error:
            reason = error.strerror or str(error)
            raise SnapshotIOError(f"cannot read {path}: {reason}", path, reason) from None


class SnapshotInUse(SnapshotError):
    """Another embedded server serves the same snapshot: each would write its own at shutdown, the last over the other's."""


def _lock_file(path: Path) -> Path:
    return path.parent / f".{path.name}.lock"


def _remove_unfinished(path: Path) -> None:
    """Remove what a server of ``path`` killed while it saved left: ``.NAME.XXXXXXXX.tmp`` files.

    :func:`save` writes to such a temporary file and replaces the snapshot with it; a ``kill -9`` (or a power cut)
    in between leaves it, as large as a snapshot, and every such crash left another. Only this server's own claim
    makes this safe: no other server writes one for ``path`` while it is held. The name is matched whole (the
    temporary files of a snapshot named ``NAME.other`` never match)."""
    unfinished = re.compile(rf"\.{re.escape(path.name)}\.[a-z0-9_]{{8}}\.tmp")
    removed = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(path.parent):
            if unfinished.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
                    removed += 1
    if removed:
        files = "file" if removed == 1 else "files"
        log.info("removed %d unfinished snapshot %s of %s, left by a server stopped while it saved", removed, files, path)


@contextlib.contextmanager
def claimed(path: Path) -> Iterator[None]:
    """Hold ``path`` for this server while it serves, or raise :class:`SnapshotInUse`.

    Two servers on one snapshot would each load it, then write their own over it at shutdown:
    the last to stop would erase the other's writes without a word (mongod refuses a second
    server on one ``dbPath`` for the same reason). The claim is an advisory lock (``flock``) on a
    hidden file next to the snapshot, which names the holder's pid: the system releases it when
    the process ends, even by ``kill -9``, so a crash never leaves it stuck; a clean stop removes it.
    Once claimed, the temporary files of a save that a crash cut short are removed (:func:`_remove_unfinished`).
    Without ``flock`` (Windows) nothing is claimed.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    lock = _lock_file(Path(path))
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            reason = error.strerror or str(error)
            raise SnapshotIOError(f"cannot write in {lock.parent} (for {path}): {reason}", lock.parent, reason) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip()
            os.close(fd)
            by = f" (pid {holder})" if holder.isdigit() else ""
            raise SnapshotInUse(
                f"cannot use {path}: another embedded server{by} serves it, and each would write its own data over "
                "the other's at shutdown; stop that server, or pass another --path"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        try:  # a holder that stopped meanwhile removed the file we opened: claim the one that is there now
            same = os.path.samestat(os.fstat(fd), os.stat(lock))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        _remove_unfinished(Path(path))
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)  # while still held, so no other server locks a file that is about to vanish
        os.close(fd)


@dataclass(frozen=True, slots=True)
class SnapshotStats:
    collections: int
    documents: int


async def save(client: Any, path: Path) -> SnapshotStats:
    """Write every database of ``client`` (a mongoeco ``AsyncMongoClient``) to ``path`` atomically."""
    from mongoeco import __version__ as mongoeco_version

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    collections = documents = 0
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            _write(
                out,
                {
                    "mongoshift": MAGIC,
                    "format": FORMAT,
                    "mongoeco": mongoeco_version,
                    "created": datetime.datetime.now(datetime.UTC),
                },
            )
            for db_name in sorted(await client.list_database_names()):
                database = client.get_database(db_name)
                specs = [spec async for spec in await database.list_collections()]
                # Views after collections: a view may be defined on any of them.
                specs.sort(key=lambda spec: (spec.get("type") == "view", spec["name"]))
                for spec in specs:
                    name = spec["name"]
                    if name.startswith("system."):
                        continue
                    kind = spec.get("type", "collection")
                    indexes: list[dict[str, Any]] = []
                    if kind == "collection":
                        collection = database.get_collection(name)
                        indexes = [
                            {k: v for k, v in index.items() if k not in {"ns", "v"}}
                            async for index in await collection.list_indexes()
                            if index.get("name") != "_id_"
                        ]
                    _write(
                        out,
                        {
                            "collection": {
                                "db": db_name,
                                "name": name,
                                "type": kind,
                                "options": spec.get("options") or {},
                                "indexes": indexes,
                            }
                        },
                    )
                    collections += 1
                    if kind == "collection":
                        async for document in database.get_collection(name).find({}):
                            _write(out, {"d": document})
                            documents += 1
            _write(out, {"end": True, "collections": collections, "documents": documents})
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    _fsync_directory(path.parent)
    log.info("snapshot saved to %s: %d collections, %d documents", path, collections, documents)
    return SnapshotStats(collections, documents)


async def load(client: Any, path: Path) -> SnapshotStats:
    """Restore the snapshot at ``path`` into ``client``; a missing file is an empty start."""
    path = Path(path)
    if not path.exists():
        log.info("no snapshot at %s: starting empty", path)
        return SnapshotStats(0, 0)
    try:
        return await _restore(client, path)
    except SnapshotError:
        raise
    except Exception as error:  # a record of the wrong shape, or one the server refuses
        raise SnapshotError(f"{path} is corrupt: {type(error).__name__}: {error}") from error


async def _restore(client: Any, path: Path) -> SnapshotStats:
    collections = documents = 0
    current: dict[str, Any] | None = None
    batch: list[dict[str, Any]] = []
    with path.open("rb") as source:
        size = max(os.fstat(source.fileno()).st_size, 1)
        report_at = time.monotonic() + _PROGRESS_EVERY
        records = _read(source, path)
        try:
            header = next(records, None)
        except SnapshotError:  # a first record that does not even decode: some other file ("truncated" would mislead)
            header = None
        if not header or header.get("mongoshift") != MAGIC:
            raise SnapshotError(f"{path} is not a mongoshift embedded snapshot")
        if header.get("format") != FORMAT:
            raise SnapshotError(f"{path} has snapshot format {header.get('format')!r}, expected {FORMAT}")
        for record in records:
            if "d" in record:
                if current is None:
                    raise SnapshotError(f"{path}: document before any collection record")
                batch.append(record["d"])
                if len(batch) >= _RESTORE_BATCH:
                    documents += await _insert(client, current, batch)
                    batch = []
                    await asyncio.sleep(0)  # an insert may never suspend: here a stop asked meanwhile ends the load
                    if time.monotonic() >= report_at:
                        log.info("loading snapshot %s: %d documents so far, %d%% of the file", path, documents, 100 * source.tell() // size)
                        report_at = time.monotonic() + _PROGRESS_EVERY
            elif "collection" in record:
                if current is not None:
                    documents += await _insert(client, current, batch)
                batch = []
                current = record["collection"]
                await _create_collection(client, current)
                await _create_indexes(client, current)
                collections += 1
            elif record.get("end") is True:
                if current is not None:
                    documents += await _insert(client, current, batch)
                log.info(
                    "snapshot loaded from %s: %d collections, %d documents", path, collections, documents
                )
                return SnapshotStats(collections, documents)
            else:
                raise SnapshotError(f"{path}: unexpected record {sorted(record)!r}")
    raise SnapshotError(f"{path} is truncated (no end record): refusing to start from a partial snapshot")


def _write(out: BinaryIO, record: dict[str, Any]) -> None:
    from bson import BSON
    from mongoeco.wire.bson_bridge import encode_wire_value

    # The same conversion as the wire layer's replies (mongoeco.wire.protocol).
    out.write(BSON.encode(encode_wire_value(record)))


def _read(source: BinaryIO, path: Path) -> Iterator[dict[str, Any]]:
    from bson import BSON
    from mongoeco.wire.bson_bridge import decode_wire_value

    while True:
        head = source.read(4)
        if not head:
            return
        size = int.from_bytes(head, "little", signed=True)
        if len(head) < 4 or size < 5:
            raise SnapshotError(f"{path} is corrupt or truncated")
        body = source.read(size - 4)
        if len(body) != size - 4:
            raise SnapshotError(f"{path} is truncated")
        try:
            # The same conversion as the wire layer's requests (mongoeco.wire.protocol).
            yield decode_wire_value(BSON(head + body).decode())
        except Exception as error:
            raise SnapshotError(f"{path} is corrupt: {error}") from error


async def _create_collection(client: Any, spec: dict[str, Any]) -> None:
    database = client.get_database(spec["db"])
    await database.command({"create": spec["name"], **spec["options"]})


async def _insert(client: Any, spec: dict[str, Any], batch: list[dict[str, Any]]) -> int:
    if not batch:
        return 0
    collection = client.get_database(spec["db"]).get_collection(spec["name"])
    result = await collection.insert_many(batch, ordered=True, bypass_document_validation=True)
    return len(result.inserted_ids)


async def _create_indexes(client: Any, spec: dict[str, Any]) -> None:
    if spec["indexes"]:
        database = client.get_database(spec["db"])
        await database.command({"createIndexes": spec["name"], "indexes": spec["indexes"]})


def _fsync_directory(directory: Path) -> None:
    # Make the rename itself durable (POSIX); not possible on every platform.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
