"""What a migration file and an application import from ``mongoshift`` itself, as the docs write it."""

from __future__ import annotations

import mongoshift


def test_every_public_name_resolves() -> None:
    for name in mongoshift.__all__:
        assert getattr(mongoshift, name) is not None, name


def test_a_background_spec_and_its_parts_import_from_the_package() -> None:
    """docs/background.md writes `Transaction(...)` beside `Background(...)`: both come from `mongoshift`."""
    from mongoshift import Adaptive, Background, Partitions, Transaction

    spec = Background(
        collection="orders", from_version=0, to_version=1, migrate=lambda doc, ctx: doc,
        transaction=Transaction(timeout_ms=5000), adaptive=Adaptive(), partitions=Partitions(),
    )
    assert spec.transaction == Transaction(timeout_ms=5000)
