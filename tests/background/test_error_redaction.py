"""A background migration's errors go through the same redaction as the migration line's."""

from __future__ import annotations

from mongoshift.api import background as bg, migrations as command

from .conftest import background_file, seed


async def test_a_transforms_own_exception_is_stored_redacted_and_capped(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 20)
    raising = (
        "def migrate(doc, ctx):\n"
        "    if doc['_id'] == 7:\n"
        "        raise ValueError('copy via mongodb://etl:bg-hunter12@10.2.2.2/ failed, dup key: { first: \"F7-value\" }\\x1b[2J' + 'y' * 5000)"
    )
    fast_project.add("0001_names.py", background_file(batch_size=10, extra="max_document_errors=5,").replace("def migrate(doc, ctx):", raising))
    await command.up(fast_project.settings())
    (result,) = await bg.run(fast_project.settings(), ["0001_names.py"])
    assert result.status == "completed" and result.failed_documents == 1
    (shown,) = result.doc_errors
    assert shown["reason"] == "transform" and shown["error_class"] == "ValueError"
    error = shown["error"]
    assert error.startswith("copy via mongodb://***@10.2.2.2/ failed, dup key: { <redacted> }")
    assert "bg-hunter12" not in error and "F7-value" not in error and "\x1b" not in error
    # what is stored is capped by the redaction (1,000 characters), what is shown by the status view
    stored = []
    for name in await db.list_collection_names():
        if name.startswith("_mongoshift"):
            stored += await db[name].find().to_list()
    assert any("copy via" in str(doc) for doc in stored)
    assert all("bg-hunter12" not in str(doc) and "F7-value" not in str(doc) and "\x1b" not in str(doc) for doc in stored)
    assert len(error) <= 200
