"""``mongoshift``: the command line.

Each command turns its flags into settings, calls one function of
:mod:`mongoshift.runner.command`, and renders the result. Every failure ends
with the exit code of its kind (docs/exit-codes.md).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from pymongo.errors import PyMongoError

from ..config import Settings, find_project_file, load_settings, read_project_file
from ..errors import ConfigInvalidError, ExitCode, MongoshiftError, RunAbortedError
from ..redaction import strip_controls, uri_secrets
from ..runner import command
from ..runner.context import CancelSignal
from ..runner.plan import status_verdict
from ..runner.scaffold import create_migration, write_config
from ..server_errors import from_pymongo
from .output import Output

T = TypeVar("T")

GLOBAL_KEYS = ("uri", "db", "dir", "config", "json", "verbose", "quiet")


def _store(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if value not in (None, False) and param.name:
        ctx.find_root().ensure_object(dict)[param.name] = value
    return value


def global_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The connection and output flags, accepted before or after the command name."""
    options = [
        click.option("--uri", help="MongoDB connection string (MONGOSHIFT_URI).", callback=_store, expose_value=False),
        click.option("--db", help="Database name (MONGOSHIFT_DB).", callback=_store, expose_value=False),
        click.option("--dir", help="Migrations folder (MONGOSHIFT_MIGRATIONS_DIR).", callback=_store, expose_value=False),
        click.option(
            "--config",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Config file (default: ./mongoshift.toml or [tool.mongoshift] in ./pyproject.toml).",
            callback=_store,
            expose_value=False,
        ),
        click.option("--json", "json", is_flag=True, help="Print one JSON document on stdout.", callback=_store, expose_value=False),
        click.option("-v", "--verbose", is_flag=True, help="More log output.", callback=_store, expose_value=False),
        click.option("-q", "--quiet", is_flag=True, help="Only warnings and errors.", callback=_store, expose_value=False),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _obj() -> dict[str, Any]:
    return click.get_current_context().find_root().ensure_object(dict)


def output() -> Output:
    obj = _obj()
    if "output" not in obj:
        obj["output"] = Output(json_mode=bool(obj.get("json")), quiet=bool(obj.get("quiet")), verbose=bool(obj.get("verbose")))
    return obj["output"]  # type: ignore[no-any-return]


def settings() -> Settings:
    out = output()  # logging is configured before anything runs
    obj = _obj()
    flags = {"uri": obj.get("uri"), "db": obj.get("db"), "migrations_dir": obj.get("dir")}
    loaded = load_settings(flags, config_path=obj.get("config"))
    if not obj.get("secrets_checked"):
        obj["secrets_checked"] = True
        _warn_secrets_in_file(out, obj.get("config"))
    return loaded


def _warn_secrets_in_file(out: Output, config_path: Path | None) -> None:
    """A project file is committed: a password in its ``uri`` is a leak waiting to happen."""
    path = config_path or (Path(os.environ["MONGOSHIFT_CONFIG"]) if os.environ.get("MONGOSHIFT_CONFIG") else find_project_file(Path.cwd()))
    if path is None:
        return
    uri = read_project_file(path).get("uri")
    found = uri_secrets(uri) if isinstance(uri, str) else []
    if found:
        out.warn(
            f"{path.name} holds secrets in its uri ({', '.join(found)}): move the full URI to MONGOSHIFT_URI "
            "(environment or a .env file kept out of git) and keep the file's uri without them"
        )


def run_async(make: Callable[[CancelSignal], Awaitable[T]]) -> T:
    """Run a command; the first Ctrl-C asks it to stop at the next boundary, the second ends it now."""
    cancel = CancelSignal()
    context = click.get_current_context(silent=True)
    json_mode = bool(context and context.find_root().ensure_object(dict).get("json"))

    async def main() -> T:
        loop = asyncio.get_running_loop()

        def on_signal(signum: int) -> None:
            if cancel.is_set():
                sys.stderr.write("\nmongoshift: second signal, stopping now\n")
                if json_mode:  # even now, one JSON document
                    stopped = {"code": 128 + signum, "kind": "second_signal", "message": f"stopped at once by a second {signal.Signals(signum).name}"}
                    Output.emit_json({"error": stopped})
                os._exit(128 + signum)
            cancel.set(f"interrupted by {signal.Signals(signum).name}")
            sys.stderr.write("\nmongoshift: stopping after the current migration (press Ctrl-C again to stop now)\n")

        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(signum, on_signal, signum)
            except (NotImplementedError, RuntimeError):
                pass
        return await make(cancel)

    return asyncio.run(main())


def confirm(question: str, yes: bool) -> None:
    """Ask before something destructive; refuse without a terminal unless --yes."""
    if yes:
        return
    if output().json_mode or not sys.stdin.isatty():
        raise ConfigInvalidError(f"{question} Pass --yes to confirm when not running interactively.")
    if not click.confirm(question, default=False):
        raise RunAbortedError("cancelled at the prompt")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mongoshift", prog_name="mongoshift")
@global_options
def cli() -> None:
    """MongoDB schema and data migrations."""


# ---------------------------------------------------------------- project files


@cli.command()
@click.option("--force", is_flag=True, help="Overwrite an existing mongoshift.toml.")
@global_options
def init(force: bool) -> None:
    """Create mongoshift.toml and the migrations folder here."""
    obj = _obj()
    path = write_config(Path.cwd(), uri=obj.get("uri"), db=obj.get("db"), migrations_dir=obj.get("dir") or "migrations", force=force)
    out = output()
    secrets = uri_secrets(obj["uri"]) if obj.get("uri") else []
    if secrets:
        out.warn(
            f"the URI holds secrets ({', '.join(secrets)}): {path.name} got it without them; "
            "set the full URI in MONGOSHIFT_URI (environment or a .env file kept out of git), which overrides the file"
        )
    if out.json_mode:
        out.json({"config": str(path), "migrations_dir": obj.get("dir") or "migrations"})
    else:
        out.say(f"created {path.name} and {obj.get('dir') or 'migrations'}/")


@cli.command()
@click.argument("name")
@click.option("--template", type=click.Path(dir_okay=False, path_type=Path), help="Template file ($title, $name, $slug).")
@click.option("--background", "background_", is_flag=True, help="A background migration skeleton.")
@global_options
def create(name: str, template: Path | None, background_: bool) -> None:
    """Write a new migration file NAME into the migrations folder."""
    s = settings()
    if background_ and template:
        raise ConfigInvalidError("--background and --template cannot be combined")
    path = create_migration(
        s.migrations_dir, name, sequential=s.sequential, template=template or (None if background_ else s.template_path), background=background_
    )
    out = output()
    if out.json_mode:
        out.json({"file": path.name, "path": str(path)})
    else:
        out.say(f"created {path}")


# ---------------------------------------------------------------- the line

WAIT_HELP = "Wait for a held lock (SECONDS, default 600) instead of failing."


def _render_report(report: command.RunReport) -> None:
    out = output()
    for warning in report.warnings:
        out.warn(warning)
    if out.json_mode:
        out.json(report.to_json())
        return
    for item in report.waiting:
        out.warn(f"stopped before {item['migration']}: it waits for {', '.join(item['waits_for'])}")
    if not report.results:
        out.say("nothing to do")
        if report.converge is not None:
            from .converge import render

            render(report.converge, title="converge")
        return
    rows = [(r.name, r.direction, r.status, r.batch, f"{r.duration_ms} ms", r.reason or r.error or "") for r in report.results]
    out.table(["migration", "direction", "status", "batch", "duration", "note"], rows)
    if report.converge is not None:
        from .converge import render

        render(report.converge, title="converge")


@cli.command()
@click.argument("file", required=False)
@click.option("--to", "to", metavar="NAME", help="Apply pending migrations up to NAME (inclusive).")
@click.option("--step", is_flag=True, help="One batch per migration, so 'down' rolls back one at a time.")
@click.option("--force", is_flag=True, help="Run FILE again even though it is applied.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--strict", is_flag=True, default=None, help="Refuse to run if an applied file changed on disk.")
@click.option("--no-lock", is_flag=True, help="Do not take the lock (local work only).")
@click.option("--wait", type=float, is_flag=False, flag_value=600.0, default=None, metavar="[SECONDS]", help=WAIT_HELP)
@click.option(
    "--converge/--no-converge", "converge", default=None, help="End a bulk up with a converge of the declared collections (default: converge_after_up)."
)
@global_options
def up(
    file: str | None, to: str | None, step: bool, force: bool, yes: bool, strict: bool | None, no_lock: bool, wait: float | None, converge: bool | None
) -> None:
    """Apply pending migrations, or FILE alone."""
    from .converge import interactive_confirm

    s = settings()
    if force:
        if not file:
            raise ConfigInvalidError("--force re-runs one named FILE; name it")
        confirm(f"Run {file} again although it is applied?", yes)
    ask = interactive_confirm(yes)
    report = run_async(
        lambda cancel: command.up(
            s, target=file, to=to, step=step, force=force, strict=strict or None, no_lock=no_lock, wait=wait, cancel=cancel,
            converge=converge, yes=yes, confirm=ask,
        )
    )
    _render_report(report)


@cli.command()
@click.argument("file", required=False)
@click.option("--batch", type=click.IntRange(min=1), help="Roll back every migration of batch N.")
@click.option("--steps", type=click.IntRange(min=1), help="Roll back the N most recently applied migrations.")
@click.option("--to", "to", metavar="NAME", help="Roll back everything applied after NAME (exclusive).")
@click.option("--no-lock", is_flag=True, help="Do not take the lock (local work only).")
@click.option("--wait", type=float, is_flag=False, flag_value=600.0, default=None, metavar="[SECONDS]", help=WAIT_HELP)
@global_options
def down(file: str | None, batch: int | None, steps: int | None, to: str | None, no_lock: bool, wait: float | None) -> None:
    """Roll back the last batch, or what FILE / --batch / --steps / --to selects."""
    s = settings()
    report = run_async(
        lambda cancel: command.down(s, target=file, batch=batch, steps=steps, to=to, no_lock=no_lock, wait=wait, cancel=cancel)
    )
    _render_report(report)


@cli.command()
@click.argument("file", required=False)
@click.option("--no-lock", is_flag=True, help="Do not take the lock (local work only).")
@click.option("--wait", type=float, is_flag=False, flag_value=600.0, default=None, metavar="[SECONDS]", help=WAIT_HELP)
@global_options
def redo(file: str | None, no_lock: bool, wait: float | None) -> None:
    """Roll back and re-apply FILE (default: the most recently applied migration)."""
    s = settings()
    report = run_async(lambda cancel: command.redo(s, target=file, no_lock=no_lock, wait=wait, cancel=cancel))
    _render_report(report)


def _render_rows(rows: list[Any], *, title: str | None = None) -> None:
    out = output()
    if out.json_mode:
        out.json({"migrations": command.rows_to_json(rows)})
        return
    if not rows:
        out.say("no migrations")
        return
    table = [(r.name, r.shown_state, r.batch, r.applied_at, r.checksum or "") for r in rows]
    out.table(["migration", "state", "batch", "applied at", "checksum"], table, title=title)


@cli.command()
@click.option(
    "--check",
    is_flag=True,
    help="Fail when work is unfinished (for CI): 8 missing file, 32 background failed, 2 pending, 31 background not completed.",
)
@global_options
def status(check: bool) -> int:
    """Show every migration and whether it is applied."""
    s = settings()
    rows = run_async(lambda cancel: command.status(s))
    _render_rows(rows)
    pending = [r.name for r in rows if r.pending]
    mismatched = [r.name for r in rows if r.checksum == "mismatch"]
    out = output()
    if mismatched:
        out.warn(f"changed after being applied: {', '.join(mismatched)}")
    if not out.json_mode:
        out.say(f"{len(rows) - len(pending)} applied, {len(pending)} pending")
    verdict = status_verdict(rows) if check else None
    if verdict is not None:
        code, message = verdict
        out.warn(message)
        return int(code)
    return 0


@cli.command(name="list")
@click.option("--pending", "only", flag_value="pending", help="Only pending migrations.")
@click.option("--applied", "only", flag_value="applied", help="Only applied migrations.")
@global_options
def list_(only: str | None) -> None:
    """List migrations, optionally only pending or applied ones."""
    s = settings()
    rows = run_async(lambda cancel: command.status(s, checksums=False))
    if only == "pending":
        rows = [r for r in rows if r.pending]
    elif only == "applied":
        rows = [r for r in rows if r.state == "applied"]
    _render_rows(rows)


@cli.group(name="dry-run")
def dry_run() -> None:
    """Show what up or down would run: same selection, no lock, no writes."""


def _render_dry(report: command.DryRunReport) -> None:
    out = output()
    for warning in report.warnings:
        out.warn(warning)
    if out.json_mode:
        out.json({"dry_run": command.rows_to_json(report.rows), "warnings": report.warnings, "waiting": report.waiting})
        return
    for item in report.waiting:
        out.warn(f"would stop before {item['migration']}: it waits for {', '.join(item['waits_for'])}")
    if not report.rows:
        out.say("nothing to do")
        return
    out.table(
        ["migration", "direction", "batch", "transaction", "checksum"],
        [(r.name, r.direction, r.batch, "yes" if r.transaction else "no", r.checksum[:12]) for r in report.rows],
        title="dry run: nothing was written",
    )


@dry_run.command(name="up")
@click.argument("file", required=False)
@click.option("--to", "to", metavar="NAME")
@click.option("--step", is_flag=True)
@click.option("--force", is_flag=True)
@click.option("--strict", is_flag=True, default=None, help="Refuse, as 'up --strict' would, if an applied file changed on disk.")
@global_options
def dry_up(file: str | None, to: str | None, step: bool, force: bool, strict: bool | None) -> None:
    """What 'up' would apply."""
    s = settings()
    _render_dry(run_async(lambda cancel: command.dry_run(s, "up", target=file, to=to, step=step, force=force, strict=strict or None)))


@dry_run.command(name="down")
@click.argument("file", required=False)
@click.option("--batch", type=click.IntRange(min=1))
@click.option("--steps", type=click.IntRange(min=1))
@click.option("--to", "to", metavar="NAME")
@global_options
def dry_down(file: str | None, batch: int | None, steps: int | None, to: str | None) -> None:
    """What 'down' would roll back."""
    s = settings()
    _render_dry(run_async(lambda cancel: command.dry_run(s, "down", target=file, batch=batch, steps=steps, to=to)))


# ---------------------------------------------------------------- the lock


@cli.command()
@global_options
def lock() -> None:
    """Show who holds the migration lock."""
    s = settings()
    holder = run_async(lambda cancel: command.lock_status(s))
    out = output()
    if out.json_mode:
        out.json({"held": holder is not None, "holder": holder.__dict__ if holder else None})
    else:
        out.say(f"held by {holder.describe()}" if holder else "the lock is free")


@cli.command()
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@global_options
def unlock(yes: bool) -> None:
    """Clear a stuck migration lock (for example after a run was killed)."""
    s = settings()
    holder = run_async(lambda cancel: command.lock_status(s))
    out = output()
    if holder is None:
        if out.json_mode:
            out.json({"cleared": False, "holder": None})
        else:
            out.say("the lock is free: nothing to clear")
        return
    confirm(f"Clear the lock held by {holder.describe()}?", yes)
    cleared = run_async(lambda cancel: command.unlock(s))
    if out.json_mode:
        out.json({"cleared": cleared is not None, "holder": cleared.__dict__ if cleared else None})
    else:
        out.say("lock cleared" if cleared else "the lock was already gone")


# ---------------------------------------------------------------- embedded server and demo


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=27017, show_default=True, help="0 picks a free port.")
@click.option("--path", type=click.Path(path_type=Path), help="Snapshot file: data survives a clean restart.")
def embedded(host: str, port: int, path: Path | None) -> int:
    """Run a MongoDB-compatible server (mongoeco) for local work; prints its URI first."""
    import logging

    from ..embedded.server import EmbeddedServerUnavailable, run
    from ..embedded.snapshot import SnapshotError

    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="mongoshift embedded: %(message)s")
    try:
        return run(host=host, port=port, path=path)
    except (EmbeddedServerUnavailable, SnapshotError) as exc:
        raise ConfigInvalidError(str(exc)) from None


@cli.command()
@global_options
def demo() -> None:
    """Start the embedded server, create a sample project, apply it and show the status."""
    from .demo import run_demo

    run_demo(output())


from . import background as _background  # noqa: E402,F401  (registers the command group)
from .converge import converge_command  # noqa: E402

cli.add_command(converge_command)


def _fail(error: MongoshiftError, args: list[str], cause: BaseException | None = None) -> None:
    """Report ``error`` (one JSON document with --json) and exit with its code; -v adds the traceback."""
    if cause is not None and ("-v" in args or "--verbose" in args):
        traceback.print_exception(cause, file=sys.stderr)
    Output(json_mode="--json" in args, quiet=True).error(error)
    sys.exit(error.exit_code)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        result = cli.main(args=args, prog_name="mongoshift", standalone_mode=False)
    except click.exceptions.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(ExitCode.ABORTED)
    except click.exceptions.UsageError as exc:
        error = ConfigInvalidError(exc.format_message())
        if "--json" in args:
            Output(json_mode=True).json({"error": error.to_json()})
        print(f"error: {strip_controls(exc.format_message())}", file=sys.stderr)  # it quotes the arguments
        if exc.ctx is not None:
            print(f"(see '{exc.ctx.command_path} --help')", file=sys.stderr)
        sys.exit(error.exit_code)
    except click.exceptions.ClickException as exc:
        exc.show()
        sys.exit(ExitCode.CONFIG_INVALID)
    except MongoshiftError as exc:
        _fail(exc, args, exc.__cause__ if isinstance(exc.__cause__, PyMongoError) else None)
    except PyMongoError as exc:
        _fail(from_pymongo(exc), args, exc)
    except KeyboardInterrupt:
        sys.exit(ExitCode.SECOND_SIGNAL)
    except Exception as exc:  # a bug: still one JSON document and a stable code; the traceback with -v
        hint = "" if "-v" in args or "--verbose" in args else " (run again with -v for the traceback, and please report it)"
        _fail(MongoshiftError(f"unexpected {type(exc).__name__}{hint}"), args, exc)
    sys.exit(result if isinstance(result, int) else 0)
