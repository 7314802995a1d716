"""The embedded server in this test process (its own event loop, in a thread), for tests that compare a
fix with the mongoeco code it replaces: they swap one patched function back for its original between
two requests (the patches keep it as ``__wrapped__``), and read the engine's state directly.

Every request still goes through pymongo and the wire, as in the other tests.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pymongo import MongoClient

from mongoshift.embedded import patches
from mongoshift.embedded.server import serve


@dataclass
class InProcessServer:
    uri: str
    engine: Any  # mongoeco's MemoryEngine serving the requests


@contextmanager
def in_process_server() -> Iterator[InProcessServer]:
    """Serve on a free port from a thread; yield the URI and the engine; stop when done."""
    patches.apply()
    from mongoeco.engines.memory import MemoryEngine

    engines: list[Any] = []
    original_init = MemoryEngine.__init__

    def remembered(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        engines.append(self)

    ready = threading.Event()
    found: dict[str, Any] = {}
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    def on_ready(uri: str) -> None:
        found["uri"] = uri
        ready.set()

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(serve("127.0.0.1", 0, None, on_ready=on_ready, stop=stop))
        except BaseException as error:  # reported by the waiting side
            found["error"] = error
            ready.set()

    MemoryEngine.__init__ = remembered  # type: ignore[method-assign]
    thread = threading.Thread(target=run, name="in-process-embedded-server", daemon=True)
    try:
        thread.start()
        ready.wait()
    finally:
        MemoryEngine.__init__ = original_init  # type: ignore[method-assign]
    if "error" in found:
        raise RuntimeError("the in-process server did not start") from found["error"]
    try:
        yield InProcessServer(found["uri"], engines[-1])
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join()
        loop.close()


@contextmanager
def original(owner: Any, name: str) -> Iterator[None]:
    """``owner.name`` as mongoeco wrote it (the patch's ``__wrapped__``) for the duration."""
    patched = getattr(owner, name)
    setattr(owner, name, patched.__wrapped__)
    try:
        yield
    finally:
        setattr(owner, name, patched)


@contextmanager
def original_update_path() -> Iterator[None]:
    """mongoeco's own update path for the duration: the ``update`` command's loop and its per-statement
    function, both as mongoeco wrote them (fixes (ah) and (av) off)."""
    from mongoeco.api._async import _collection_modify
    from mongoeco.api._async._database_admin_write_commands import DatabaseAdminWriteCommandService

    with original(_collection_modify, "execute_server_update"), original(DatabaseAdminWriteCommandService, "command_update"):
        yield


def same_tree(a: Any, b: Any) -> bool:
    """Equal values with the same types at every node (the codec's containers included), fields in the same order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_tree(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_tree(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) or (a != a and b != b)  # NaN


def stale_decodes(server: InProcessServer) -> list[Any]:
    """The ``_id``s of the stored documents whose kept decoded form is not what decoding their payload gives
    (fix (bl) keeps the document it wrote as its decoded form instead of decoding it on the next read)."""
    from mongoeco.engines.memory import _StoredDocument

    engine = server.engine
    stale = []
    for collections in list(engine._storage.values()):
        for coll in list(collections.values()):
            for data in list(coll.values()):
                if type(data) is _StoredDocument and data.decoded_wrapped is not None:
                    decoded = engine._decode_codec_payload(data.payload, preserve_bson_wrappers=True)
                    if not same_tree(data.decoded_wrapped, decoded):
                        stale.append(decoded.get("_id"))
    return stale


def sync_client(server: InProcessServer) -> MongoClient[Any]:
    return MongoClient(server.uri, serverSelectionTimeoutMS=30_000, socketTimeoutMS=300_000)


def count_calls(monkeypatch: Any, *targets: tuple[Any, str]) -> dict[str, int]:
    """Wrap each ``owner.name`` of ``targets`` so that its calls are counted: the counts by name
    (``monkeypatch.undo()`` puts the originals back)."""
    calls = dict.fromkeys((name for _, name in targets), 0)

    def counting(name: str, function: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return function(*args, **kwargs)

        return counted

    for owner, name in targets:
        monkeypatch.setattr(owner, name, counting(name, getattr(owner, name)))
    return calls



def versioned(collection: Any, count: int, fields: dict[str, Any]) -> list[Any]:
    """``collection`` emptied, given the version index ``{__v: 1, _id: 1}``, and filled with ``count`` documents
    at version 1, revision 1, with ``fields``, under ObjectId ``_id``s in order: the ``_id``s."""
    from bson import ObjectId

    collection.drop()
    collection.create_index([("__v", 1), ("_id", 1)])
    ids = [ObjectId(f"{i:024x}") for i in range(count)]
    collection.insert_many([{"_id": i, "__v": 1, "__rev": 1, **fields} for i in ids])
    return ids
