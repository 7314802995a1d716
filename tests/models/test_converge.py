"""Generated declarations applied by converge on the embedded server: exactly those indexes, that validator (issue 30, item 6)."""

from __future__ import annotations

import datetime
import decimal
import tomllib
import uuid
from typing import Any

import pytest
from pymongo.errors import WriteError

from ..conftest import Project
from .conftest import PACKAGE, write_models
from .test_generate import BEANIE, MONGOENGINE


def plain(value: Any) -> Any:
    """SON as dict (key order is compared where it matters: ``key`` as a list of pairs)."""
    return {k: plain(v) for k, v in value.items()} if isinstance(value, dict) else value


async def server_indexes(db: Any, name: str) -> dict[str, dict[str, Any]]:
    """Each index's key (as pairs, in order) and options; a false flag is the same as none."""
    out = {}
    async for index in await db[name].list_indexes():
        options = {k: plain(v) for k, v in index.items() if k not in ("v", "ns", "name", "key") and v is not False}
        if index["name"] == "_id_":
            options.pop("unique", None)  # some servers report it for _id_
        out[index["name"]] = {"key": list(index["key"].items()), **options}
    return out


async def server_validation(db: Any, name: str) -> dict[str, Any]:
    (info,) = [c async for c in await db.list_collections(filter={"name": name})]
    return dict(info["options"])


def generated(project: Project, name: str) -> dict[str, Any]:
    return tomllib.loads((project.root / "collections" / f"{name}.toml").read_text(encoding="utf-8"))


async def test_beanie_generate_then_converge_gives_exactly_those_indexes_and_validator(project: Project, cli, db) -> None:  # type: ignore[no-untyped-def]
    write_models(project, BEANIE)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    result = cli(project, "converge", "--yes")
    assert result.returncode == 0, result.stderr
    assert await server_indexes(db, "customers") == {
        "_id_": {"key": [("_id", 1)]},
        "email_1": {"key": [("email", 1)], "unique": True},
        "name_1": {"key": [("name", 1)]},
        "seen_-1_name_1": {"key": [("seen", -1), ("name", 1)]},
        "seen_ttl": {"key": [("seen", 1)], "expireAfterSeconds": 3600},
        "paid_only": {"key": [("tier", 1)], "partialFilterExpression": {"tier": "paid"}},
    }
    options = await server_validation(db, "customers")
    assert options["validator"] == generated(project, "customers")["validator"]
    assert (options["validationLevel"], options["validationAction"]) == ("moderate", "warn")
    assert cli(project, "converge", "--check").returncode == 0

    # warn: a document the model would refuse is still stored (old documents are not blocked)
    await db.customers.insert_one({"email": 5, "name": "n", "seen": datetime.datetime.now(datetime.UTC)})


async def test_mongoengine_generate_then_converge(project: Project, cli, db) -> None:  # type: ignore[no-untyped-def]
    write_models(project, MONGOENGINE)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    assert cli(project, "converge", "--yes").returncode == 0
    assert await server_indexes(db, "people") == {
        "_id_": {"key": [("_id", 1)]},
        "kind_age": {"key": [("kind", 1), ("age", -1)], "partialFilterExpression": {"age": {"$gt": 17}}},
        "s_1": {"key": [("s", 1)], "expireAfterSeconds": 60},
        "email_1": {"key": [("email", 1)], "unique": True},
        "nick_1": {"key": [("nick", 1)], "unique": True, "sparse": True},
    }
    assert (await server_validation(db, "people"))["validator"] == generated(project, "people")["validator"]


async def test_validation_action_error_declared_by_hand_refuses_a_violating_document(project: Project, cli, db) -> None:  # type: ignore[no-untyped-def]
    write_models(project, BEANIE)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    path = project.root / "collections" / "customers.toml"
    path.write_text(path.read_text(encoding="utf-8").replace('validation_action = "warn"', 'validation_action = "error"'), encoding="utf-8")
    assert cli(project, "collections", "generate").returncode == 0  # the edit survives a regeneration
    assert cli(project, "converge", "--yes").returncode == 0
    now = datetime.datetime.now(datetime.UTC)
    good = {"email": "a@example.com", "name": "Ada", "tier": "paid", "tags": ["x"], "address": {"city": "Paris", "zip": None}, "seen": now}
    await db.customers.insert_one(dict(good))  # insert_one adds an _id to the dict it gets
    refused = [
        {**good, "email": "b@example.com", "tier": "gold"},            # not in the enum
        {k: v for k, v in good.items() if k != "seen"} | {"email": "c@example.com"},  # a required field missing
        {**good, "email": "d@example.com", "tags": [1]},               # a list item of the wrong type
        {**good, "email": "e@example.com", "address": {"zip": "75"}},  # a nested required field missing
        {**good, "email": "f@example.com", "seen": "yesterday"},       # a string where a date is declared
    ]
    for document in refused:
        with pytest.raises(WriteError) as caught:
            await db.customers.insert_one(dict(document))
        assert caught.value.code == 121  # DocumentValidationFailure
    assert await db.customers.count_documents({}) == 1
    await db.customers.insert_one({**good, "email": "g@example.com", "address": None, "tier": "free"})  # Optional: null is fine


RICH = '''
import datetime
import decimal
import uuid
import decimal
import enum
import uuid
from typing import Literal, Optional

from beanie import Document, Link
from pydantic import BaseModel, Field


class Color(enum.Enum):
    red = "red"
    blue = "blue"


class Part(BaseModel):
    sku: str
    qty: int = Field(gt=0)


class Maker(Document):
    label: str

    class Settings:
        name = "makers"


class Product(Document):
    title: str = Field(min_length=1, max_length=80)
    price: decimal.Decimal
    ref: uuid.UUID
    launched: datetime.date
    warranty: datetime.timedelta
    blob: bytes
    color: Color
    size: Literal["s", "m", "l"]
    parts: list[Part]
    maker: Link[Maker]
    previous: Optional[Link[Maker]] = None
    note: Optional[str] = None
    weight: float | int = 1

    class Settings:
        name = "products"
'''


async def test_what_beanie_stores_passes_the_generated_validator_with_action_error(project: Project, cli, db, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The validator says what Beanie writes (a UUID as binary, a date as a datetime, a Link as a DBRef), not what JSON would."""
    write_models(project, RICH)
    result = cli(project, "collections", "generate", "--models", f"{PACKAGE}.models")
    assert result.returncode == 0
    assert "Product.maker: a Beanie Link is stored as a DBRef" in result.stderr
    path = project.root / "collections" / "products.toml"
    path.write_text(path.read_text(encoding="utf-8").replace('validation_action = "warn"', 'validation_action = "error"')
                    .replace('validation_level = "moderate"', 'validation_level = "strict"'), encoding="utf-8")
    assert cli(project, "converge", "--yes").returncode == 0

    from beanie import init_beanie

    monkeypatch.syspath_prepend(str(project.root))
    from shopapp.models import Color, Maker, Part, Product  # type: ignore[import-not-found]  # written by the test

    await init_beanie(database=db, document_models=[Maker, Product])
    maker = await Maker(label="acme").insert()
    product = Product(
        title="Lamp", price=decimal.Decimal("9.90"), ref=uuid.uuid4(), launched=datetime.date(2026, 1, 2),
        warranty=datetime.timedelta(days=365), blob=b"\x00\x01", color=Color.red, size="m",
        parts=[Part(sku="a", qty=2)], maker=maker,
    )
    await product.insert()
    stored = await db.products.find_one({"_id": product.id})
    assert stored["title"] == "Lamp" and stored["maker"].collection == "makers"
    with pytest.raises(WriteError) as caught:
        await db.products.insert_one({**{k: v for k, v in stored.items() if k != "_id"}, "size": "xl"})
    assert caught.value.code == 121


def test_what_mongoengine_saves_passes_the_generated_validator_with_action_error(  # type: ignore[no-untyped-def]
    project: Project, cli, sync_client, mongo_uri: str, db_name: str, monkeypatch
) -> None:
    import mongoengine
    from pymongo.errors import WriteError as SyncWriteError

    write_models(project, MONGOENGINE.replace("    shape = me.GenericReferenceField()\n", "    tags = me.ListField(me.StringField())\n"))
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    path = project.root / "collections" / "people.toml"
    path.write_text(path.read_text(encoding="utf-8").replace('validation_action = "warn"', 'validation_action = "error"'), encoding="utf-8")
    assert cli(project, "converge", "--yes").returncode == 0

    monkeypatch.syspath_prepend(str(project.root))
    from shopapp.models import Address, Person  # type: ignore[import-not-found]  # written by the test

    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None, microsecond=0)  # the TTL index on seen: not expired
    mongoengine.connect(db=db_name, host=mongo_uri, alias="default", uuidRepresentation="standard")
    try:
        person = Person(email="a@example.com", kind="staff", age=30, address=Address(city="Oslo"), tags=["x"],
                        seen=now).save()
        stored = sync_client[db_name].people.find_one({"_id": person.id})
        assert stored["s"] == now  # the db_field name is the declared one
        with pytest.raises(SyncWriteError) as caught:
            sync_client[db_name].people.insert_one({"email": "b@example.com", "kind": "robot"})
        assert caught.value.code == 121
    finally:
        mongoengine.disconnect(alias="default")
