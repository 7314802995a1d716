"""``mongoshift demo``: the whole line on the embedded server, in a throwaway folder."""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from pymongo import AsyncMongoClient

from .. import api
from ..api import background as bg
from ..embedded.process import embedded_server
from ..project.connection import connect
from ..project.settings import Settings, load_settings
from ..project.wording import plural
from .output import Output
from .progress import show_progress

DEMO_DB = "mongoshift_demo"
ORDERS = 20_000

SAMPLE_MIGRATIONS = {
    "20260101000000_create_users.py": '''"""Create the users collection with a unique e-mail index."""

description = "create users with a unique e-mail index"


async def up(ctx):
    await ctx.db.users.insert_many([
        {"fullname": "Ada Lovelace", "email": "ada@example.com"},
        {"fullname": "Alan Turing", "email": "alan@example.com"},
        {"fullname": "Grace Hopper", "email": "grace@example.com"},
    ])
    await ctx.db.users.create_index("email", unique=True, name="email_unique")


async def down(ctx):
    await ctx.db.users.drop()
''',
    "20260102000000_add_status.py": '''"""A plain (sync) function: pymongo's sync API, run in a worker thread."""

description = "give every user a status"


def up(ctx):
    ctx.db.users.update_many({"status": {"$exists": False}}, {"$set": {"status": "active"}})


def down(ctx):
    ctx.db.users.update_many({}, {"$unset": {"status": ""}})
''',
    "20260104000000_order_totals.py": '''"""A background migration: up only registers it; lanes rewrite the orders while the app runs."""

from mongoshift import Background


def migrate(doc, ctx):
    doc["total_cents"] = doc["price_cents"] * doc.pop("qty")
    doc["currency"] = doc.pop("cur", "EUR")
    return doc


background = Background(
    collection="orders",
    from_version=1,
    to_version=2,
    migrate=migrate,
    batch_size=500,
    pause_ms=0,
    max_parallel=4,
    description="compute order totals",
)
''',
    "20260103000000_rename_fullname.py": '''"""The rename and its changelog record commit together in one transaction."""

description = "rename fullname to name"
use_transaction = True


async def up(ctx):
    await ctx.db.users.update_many({}, {"$rename": {"fullname": "name"}}, session=ctx.session)


async def down(ctx):
    await ctx.db.users.update_many({}, {"$rename": {"name": "fullname"}}, session=ctx.session)
''',
}


def write_sample_project(folder: Path, uri: str, db: str) -> Path:
    (folder / "migrations").mkdir(parents=True, exist_ok=True)
    for name, source in SAMPLE_MIGRATIONS.items():
        (folder / "migrations" / name).write_text(source, encoding="utf-8")
    config = folder / "mongoshift.toml"
    config.write_text(f'[mongoshift]\nuri = "{uri}"\ndb = "{db}"\nmigrations_dir = "migrations"\n', encoding="utf-8")
    return config


def _show_status(out: Output, rows: list[api.StatusRow], title: str) -> None:
    out.table(["migration", "state", "batch", "checksum"], [(r.name, r.shown_state, r.batch, r.checksum or "") for r in rows], title=title)


async def seed_orders(client: AsyncMongoClient[Any], n: int = ORDERS) -> None:
    orders = client[DEMO_DB].orders
    await orders.create_index([("__v", 1), ("_id", 1)])
    rng = random.Random(7)
    for start in range(0, n, 1000):
        await orders.insert_many(
            [
                {"_id": i, "__v": 1, "__rev": 1, "price_cents": rng.randrange(100, 10_000), "qty": rng.randrange(1, 9), "cur": "EUR"}
                for i in range(start, min(n, start + 1000))
            ]
        )


async def application(client: AsyncMongoClient[Any], stop: asyncio.Event, written: dict[int, int], orders_count: int) -> int:
    """A running application: updates random orders, bumping the revision as the contract says."""
    orders = client[DEMO_DB].orders
    rng = random.Random(11)
    k = 0
    while not stop.is_set():
        k += 1
        order = rng.randrange(orders_count)
        await orders.update_one({"_id": order}, {"$set": {"note": f"app write {k}"}, "$inc": {"__rev": 1}})
        written[order] = k
        await asyncio.sleep(0.01)
    return k


async def background_scenario(settings: Settings, out: Output, orders_count: int) -> dict[str, Any]:
    client = await connect(settings)
    try:
        stop = asyncio.Event()
        written: dict[int, int] = {}
        app = asyncio.create_task(application(client, stop, written, orders_count))
        started = time.monotonic()
        run = asyncio.create_task(bg.run(settings, ["20260104000000_order_totals.py"], concurrency=4))
        if out.out.is_terminal and not out.json_mode and not out.quiet:
            await show_progress(lambda: bg.status(settings), run, out.out)
        reports = await run
        stop.set()
        app_writes = await app
        seconds = time.monotonic() - started
        orders = client[DEMO_DB].orders
        lost = 0
        for order, k in written.items():
            doc = await orders.find_one({"_id": order}, {"note": 1})
            lost += (doc or {}).get("note") != f"app write {k}"
        return {
            "report": reports[0],
            "seconds": seconds,
            "app_writes": app_writes,
            "app_documents": len(written),
            "lost_app_writes": lost,
            "old_shape_left": await orders.count_documents({"__v": 1}),
            "sample": await orders.find_one({"_id": 1}, {"_id": 0}),
            # what 'mongoshift status' shows now: the background migration's own state is final
            "status": await api.status(settings, client=client),
        }
    finally:
        await client.close()


def run_demo(out: Output, orders_count: int = ORDERS) -> None:
    """The walkthrough; ``orders_count`` sizes the background migration (the tests use a small one)."""
    out.say("starting the embedded server ...")
    with embedded_server() as uri, tempfile.TemporaryDirectory(prefix="mongoshift-demo-") as tmp:
        out.say(f"server: {uri}")
        config = write_sample_project(Path(tmp), uri, DEMO_DB)
        settings = load_settings({}, config_path=config)
        out.say(f"sample project: {tmp} ({len(SAMPLE_MIGRATIONS)} migrations)")

        async def scenario() -> dict[str, Any]:
            client = await connect(settings)
            try:
                await seed_orders(client, orders_count)
                before = await api.status(settings)
                if not out.json_mode:  # before 'up' prints its own lines, so that they follow this table
                    _show_status(out, before, "before 'mongoshift up'")
                report = await api.up(settings)
                after = await api.status(settings)
                user = await client[DEMO_DB].users.find_one({"email": "ada@example.com"}, {"_id": 0})
            finally:
                await client.close()
            return {"report": report, "after": after, "user": user}

        out.say(f"seeding {orders_count:,} orders for the background migration ...")
        result = asyncio.run(scenario())
        report = result["report"]
        assert isinstance(report, api.RunReport)
        if not out.json_mode:
            out.table(
                ["migration", "status", "batch", "duration", "note"],
                [(r.name, r.status, r.batch, f"{r.duration_ms} ms", r.reason or "") for r in report.results],
                title="mongoshift up",
            )
            out.say(f"a migrated document: {result['user']}")
            _show_status(out, result["after"], "after 'mongoshift up': the background migration is registered, not yet run")
            out.say(f"running the background migration over {orders_count:,} orders with 4 lanes while the application writes ...")
        bg_result = asyncio.run(background_scenario(settings, out, orders_count))
        bg_report = bg_result["report"]
        if out.json_mode:
            out.json({
                "uri": uri,
                "up": report.to_json(),
                "status_after_up": api.rows_to_json(result["after"]),
                "status": api.rows_to_json(bg_result["status"]),
                "sample_document": result["user"],
                "background": bg_report.to_json(),
                "application": {k: v for k, v in bg_result.items() if k not in ("report", "status")},
            })
            return
        totals = bg_report.totals
        out.table(
            ["status", "passes", "migrated", "retried", "conflicts", "seconds", "docs/s"],
            [(bg_report.status, bg_report.pass_number, totals["migrated"], totals["retried"], totals["conflicts"],
              f"{bg_result['seconds']:.1f}", f"{totals['scanned'] / bg_result['seconds']:,.0f}")],
            title="background migration 20260104000000_order_totals.py",
        )
        out.say(
            f"application: {plural(bg_result['app_writes'], 'write')} to {plural(bg_result['app_documents'], 'order')} during the run, "
            f"{bg_result['lost_app_writes']} lost; {plural(bg_result['old_shape_left'], 'order')} left in the old shape"
        )
        out.say(f"a migrated order: {bg_result['sample']}")
        _show_status(out, bg_result["status"], "'mongoshift status' after the background migration")
        out.say("done; the server and the sample project are removed")
