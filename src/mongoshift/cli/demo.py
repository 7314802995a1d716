"""``mongoshift demo``: the whole line on the embedded server, in a throwaway folder."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from ..config import load_settings
from ..embedded.process import embedded_server
from ..runner import command
from .output import Output

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


def _show_status(out: Output, rows: list[command.StatusRow], title: str) -> None:
    out.table(["migration", "state", "batch", "checksum"], [(r.name, r.state, r.batch, r.checksum or "") for r in rows], title=title)


def run_demo(out: Output) -> None:
    out.say("starting the embedded server ...")
    with embedded_server() as uri, tempfile.TemporaryDirectory(prefix="mongoshift-demo-") as tmp:
        out.say(f"server: {uri}")
        config = write_sample_project(Path(tmp), uri, "mongoshift_demo")
        settings = load_settings({}, config_path=config)
        out.say(f"sample project: {tmp} ({len(SAMPLE_MIGRATIONS)} migrations)")

        async def scenario() -> dict[str, object]:
            before = await command.status(settings)
            report = await command.up(settings)
            after = await command.status(settings)
            from ..connection import connect

            client = await connect(settings)
            try:
                user = await client["mongoshift_demo"].users.find_one({"email": "ada@example.com"}, {"_id": 0})
            finally:
                await client.close()
            return {"before": before, "report": report, "after": after, "user": user}

        result = asyncio.run(scenario())
        report = result["report"]
        assert isinstance(report, command.RunReport)
        if out.json_mode:
            out.json({
                "uri": uri,
                "up": report.to_json(),
                "status": command.rows_to_json(result["after"]),  # type: ignore[arg-type]
                "sample_document": result["user"],
            })
            return
        _show_status(out, result["before"], "before 'mongoshift up'")  # type: ignore[arg-type]
        out.table(
            ["migration", "status", "batch", "duration"],
            [(r.name, r.status, r.batch, f"{r.duration_ms} ms") for r in report.results],
            title="mongoshift up",
        )
        _show_status(out, result["after"], "after 'mongoshift up'")  # type: ignore[arg-type]
        out.say(f"a migrated document: {result['user']}")
        out.say("done; the server and the sample project are removed")
