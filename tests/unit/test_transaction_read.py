"""A transactional batch's size check on its replies (:class:`..write.transaction.Read`): the same cut as
the raw read's exact check (:func:`..write.transaction.fitting`), for any documents, any split into
replies and any limit, without a server (the read itself is in ``tests/background/test_transaction_read.py``)."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from bson import encode
from bson.raw_bson import RawBSONDocument
from hypothesis import given, settings, strategies as st

from mongoshift.background.write.transaction import Read, fitting


def _reply(docs: list[dict[str, Any]], first: bool) -> RawBSONDocument:
    cursor = {"firstBatch" if first else "nextBatch": docs, "id": 0, "ns": "db.c"}
    return RawBSONDocument(encode({"cursor": cursor, "ok": 1.0}))


@settings(max_examples=300, deadline=None)
@given(
    pads=st.lists(st.integers(0, 300), min_size=1, max_size=12),
    cuts=st.lists(st.integers(1, 12), max_size=3),
    limit=st.integers(0, 3000),
)
def test_a_read_is_cut_where_the_raw_documents_exact_sizes_cut_it(pads: list[int], cuts: list[int], limit: int) -> None:
    docs = [{"_id": i, "pad": "x" * pad} for i, pad in enumerate(pads)]
    bounds = sorted({0, *(c for c in cuts if c < len(docs)), len(docs)})
    replies = [_reply(docs[a:b], first=i == 0) for i, (a, b) in enumerate(pairwise(bounds))]
    read = Read(list(docs), replies)
    expected = fitting([RawBSONDocument(encode(doc)) for doc in docs], limit)
    kept = read.fit(limit)
    assert kept == docs[: len(expected)]
    assert all(a is b for a, b in zip(kept, read.docs, strict=False))  # the documents read, not copies


def test_replies_within_the_limit_are_kept_whole_without_measuring_each_document() -> None:
    docs = [{"_id": i, "pad": "x" * 100} for i in range(5)]
    reply = _reply(docs, first=True)
    read = Read(docs, [reply])
    assert read.fit(len(reply.raw)) is docs
    assert read.fit(len(reply.raw) - 1) == docs  # the documents alone still fit: measured one by one
    assert read.fit(len(encode(docs[0])) * 2) == docs[:2]
    assert read.fit(0) == docs[:1]  # at least one
