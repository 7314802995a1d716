"""``mongoshift``: the command line, and the migration line's own commands.

Each command turns its flags into settings, calls one function of
:mod:`mongoshift.api`, and renders the result. Every failure ends
with the exit code of its kind (docs/exit-codes.md).
"""

from __future__ import annotations

import itertools
import re
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeIs

import click

from ..errors import AddressInUseError, ConfigInvalidError, ExitCode, IOFailedError, MongoshiftError, RunAbortedError
from ..project.redaction import elide_long_words, escape_undecodable, redact, uri_secrets
from .adoption import baseline as baseline_command, import_command
from .app import (
    LINE_STOPPING,
    WAIT_HELP,
    FloatRange,
    IntRange,
    cli,
    confirm,
    global_options,
    json_option,
    listen_host,
    named_file,
    options,
    output,
    run_async,
    settings,
)
from .audit import audit as audit_command
from .background import background as background_group
from .converge import converge_command, interactive_confirm, render, render_failed
from .dashboard import dashboard as dashboard_command
from .lint import lint as lint_command
from .models import collections_group
from .output import Output, document_written, guard_stdout, release_stdout, shown_path, unguard_stdout
from .squash import squash as squash_command
from .tenants import across, requested, tenant_options

if TYPE_CHECKING:
    from pymongo.errors import PyMongoError

    from ..api import migrations as api

# Start-up time (bench/cli.py): this module loads for every command and for --help, so it
# imports only click and light modules; each command imports the API (the driver, pydantic,
# the runner) when it runs, and only the parts it uses.

# ---------------------------------------------------------------- project files


@cli.command()
@click.option("--force", is_flag=True, help="Overwrite an existing mongoshift.toml.")
@global_options
def init(force: bool) -> None:
    """Create mongoshift.toml and the migrations folder here."""
    from ..line.scaffold import write_config  # start-up time: the runner loads when a command runs

    obj = options()
    folder = obj["dir"] if obj.get("dir") is not None else "migrations"  # --dir "" is refused, as by every command
    path = write_config(Path.cwd(), uri=obj.get("uri"), db=obj.get("db"), migrations_dir=folder, force=force)
    out = output()
    secrets = uri_secrets(obj["uri"]) if obj.get("uri") else []
    if secrets:
        out.warn(
            f"the URI holds secrets ({', '.join(secrets)}): {path.name} got it without them; "
            "set the full URI in MONGOSHIFT_URI (environment or a .env file kept out of git), which overrides the file"
        )
    if out.json_mode:
        out.json(
            {"config": str(path), "migrations_dir": folder, "uri_secrets_removed": secrets, "uri_env": "MONGOSHIFT_URI"}
        )
    else:
        out.say(f"created {path.name} and {folder}/")


@cli.command()
@click.argument("name")
@click.option("--template", type=click.Path(dir_okay=False, path_type=Path), help="Template file ($title, $name, $slug).")
@click.option("--background", "background_", is_flag=True, help="A background migration skeleton.")
@click.option("--from-models", "from_models", is_flag=True, help="Background migrations for the models' data-shape changes since the snapshot.")
@click.option("--models", "models", metavar="PKG", help="With --from-models: the models package (default: the snapshot's).")
@global_options
def create(name: str, template: Path | None, background_: bool, from_models: bool, models: str | None) -> None:
    """Write a new migration file NAME into the migrations folder."""
    from ..line.scaffold import create_migration  # start-up time: the runner loads when a command runs

    if from_models:
        if background_ or template:
            raise ConfigInvalidError("--from-models cannot be combined with --background or --template")
        from .models import create_from_models  # start-up time: loaded only when this option is used

        create_from_models(name, models)
        return
    if models is not None:
        raise ConfigInvalidError("--models goes with --from-models")
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
        out.say(f"created {shown_path(path)}")


# ---------------------------------------------------------------- the line

BATCH_LABEL_HELP = "Record the run in batch N (an existing one joins it): single-file runs that share N roll back together."
ORDERED_UP_HELP = "With FILE: refuse while a file that sorts before it is not applied (a queue driving files one by one)."
ORDERED_DOWN_HELP = "With FILE: refuse while a migration that sorts after it is still applied."
STRICT_BACK_HELP = "Refuse to run if an applied file changed on disk (a changed file is never rolled back on a guess)."


def _render_results(results: list[dict[str, Any]]) -> None:
    """The migrations a run applied or rolled back (``MigrationResult.to_json`` each), as a table."""
    rows = [(r["name"], r["direction"], r["status"], r["batch"], f"{r['duration_ms']} ms", r["reason"] or r["error"] or "") for r in results]
    if rows:
        output().table(["migration", "direction", "status", "batch", "duration", "note"], rows)


def _render_report(report: api.RunReport) -> None:
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
            render(report.converge, title="converge")
        return
    _render_results([r.to_json() for r in report.results])
    if report.converge is not None:
        render(report.converge, title="converge")


@cli.command()
@click.argument("file", required=False)
@click.option("--to", "to", metavar="NAME", help="Apply pending migrations up to NAME (inclusive).")
@click.option("--step", is_flag=True, help="One batch per migration, so 'down' rolls back one at a time.")
@click.option("--force", is_flag=True, help="Run FILE again even though it is applied.")
@click.option("--batch", "label", type=IntRange(min=1), metavar="N", help=BATCH_LABEL_HELP)  # the bound: api.migrations
@click.option("--ordered", is_flag=True, help=ORDERED_UP_HELP)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--strict", is_flag=True, default=None, help="Refuse to run if an applied file changed on disk.")
@click.option("--no-lock", is_flag=True, help="Do not take the lock (local work only).")
@click.option("--wait", type=FloatRange(min=0), is_flag=False, flag_value=600.0, default=None, metavar="[SECONDS]", help=WAIT_HELP)
@click.option(
    "--converge/--no-converge", "converge", default=None, help="End a bulk up with a converge of the declared collections (default: converge_after_up)."
)
@tenant_options
@global_options
def up(
    file: str | None, to: str | None, step: bool, force: bool, label: int | None, ordered: bool, yes: bool, strict: bool | None,
    no_lock: bool, wait: float | None, converge: bool | None,
) -> int:
    """Apply pending migrations, or FILE alone."""
    from ..api.options import Lock  # start-up time: the API loads when a command runs
    from ..api.session import per_call

    s = settings()
    tenants = requested()
    if force:
        if file is None:
            raise ConfigInvalidError("--force re-runs one named FILE; name it")
        named_file(s, file)  # a typo is refused (8, 19), not asked about
        confirm(f"Run {file} even if it is already applied{' in every selected tenant' if tenants else ''}?", yes)
    if tenants is not None:
        from ..api.tenants import imports_for_up, judge_run  # start-up time: the API loads when a command runs

        # one question cannot be asked of many tenants at once: --yes allows destructive converge steps, else they are refused
        return across(
            s, tenants, "up",
            lambda ms: ms.up(
                file, to=to, step=step, force=force, strict=strict or None, lock=Lock(not no_lock, wait),
                converge=converge, confirm=yes, batch=label, ordered=ordered,
            ),
            judge=judge_run, result_json=lambda r: r.to_json(), prepare=imports_for_up(s, file, to),
        )
    confirmation = interactive_confirm(yes)
    try:
        report = run_async(
            lambda cancel: per_call(s, cancel=cancel).up(
                file, to=to, step=step, force=force, strict=strict or None, lock=Lock(not no_lock, wait),
                converge=converge, confirm=confirmation(cancel), batch=label, ordered=ordered,
            ),
            stopping=LINE_STOPPING,
        )
    except MongoshiftError as exc:  # the converge ending the run refused or failed: the migrations it ran did apply
        if not output().json_mode and "converge" in exc.details and "results" in exc.details:
            _render_results(exc.details["results"])
            render_failed(exc.details["converge"])
        raise
    _render_report(report)
    return 0


@cli.command()
@click.argument("file", required=False)
@click.option("--batch", type=IntRange(min=1), help="Roll back every migration of batch N.")
@click.option("--steps", type=IntRange(min=1), help="Roll back the N most recently applied migrations.")
@click.option("--to", "to", metavar="NAME", help="Roll back everything applied after NAME (exclusive).")
@click.option("--ordered", is_flag=True, help=ORDERED_DOWN_HELP)
@click.option("--strict", is_flag=True, default=None, help=STRICT_BACK_HELP)
@click.option("--no-lock", is_flag=True, help="Do not take the lock (local work only).")
@click.option("--wait", type=FloatRange(min=0), is_flag=False, flag_value=600.0, default=None, metavar="[SECONDS]", help=WAIT_HELP)
@tenant_options
@global_options
def down(
    file: str | None, batch: int | None, steps: int | None, to: str | None, ordered: bool, strict: bool | None, no_lock: bool, wait: float | None
) -> int:
    """Roll back the last batch, or what FILE / --batch / --steps / --to selects."""
    from ..api.options import Lock  # start-up time: the API loads when a command runs
    from ..api.session import per_call

    s = settings()
    if (tenants := requested()) is not None:
        from ..api.tenants import judge_run, reversible_for_down  # start-up time: the API loads when a command runs

        return across(
            s, tenants, "down",
            lambda ms: ms.down(file, batch=batch, steps=steps, to=to, lock=Lock(not no_lock, wait), ordered=ordered, strict=strict or None),
            judge=judge_run, result_json=lambda r: r.to_json(), prepare=reversible_for_down(s, file),
        )
    report = run_async(
        lambda cancel: per_call(s, cancel=cancel).down(
            file, batch=batch, steps=steps, to=to, lock=Lock(not no_lock, wait), ordered=ordered, strict=strict or None
        ),
        stopping=LINE_STOPPING,
    )
    _render_report(report)
    return 0


@cli.command()
@click.argument("file", required=False)
@click.option("--strict", is_flag=True, default=None, help=STRICT_BACK_HELP)
@click.option("--no-lock", is_flag=True, help="Do not take the lock (local work only).")
@click.option("--wait", type=FloatRange(min=0), is_flag=False, flag_value=600.0, default=None, metavar="[SECONDS]", help=WAIT_HELP)
@tenant_options
@global_options
def redo(file: str | None, strict: bool | None, no_lock: bool, wait: float | None) -> int:
    """Roll back and re-apply FILE (default: the most recently applied migration)."""
    from ..api.options import Lock  # start-up time: the API loads when a command runs
    from ..api.session import per_call

    s = settings()
    if (tenants := requested()) is not None:
        from ..api.tenants import judge_run, reversible_for_down  # start-up time: the API loads when a command runs

        return across(
            s, tenants, "redo", lambda ms: ms.redo(file, lock=Lock(not no_lock, wait), strict=strict or None), judge=judge_run,
            result_json=lambda r: r.to_json(), prepare=reversible_for_down(s, file),
        )
    report = run_async(
        lambda cancel: per_call(s, cancel=cancel).redo(file, lock=Lock(not no_lock, wait), strict=strict or None), stopping=LINE_STOPPING
    )
    _render_report(report)
    return 0


def _render_rows(rows: list[Any], *, title: str | None = None, only: str | None = None) -> None:
    from ..api import migrations as api  # start-up time: the API loads when a command runs

    out = output()
    if out.json_mode:
        out.json({"migrations": api.rows_to_json(rows)})
        return
    if not rows:  # "no migrations" for a filter that left none out of many read as an empty folder
        out.say(f"no {only} migrations" if only else "no migrations")
        return
    table = [(r.name, r.shown_state, r.batch, r.applied_at, r.checksum or "") for r in rows]
    out.table(["migration", "state", "batch", "applied at", "checksum"], table, title=title)


@cli.command()
@click.option(
    "--check",
    is_flag=True,
    help="Fail when work is unfinished (for CI): 8 missing file, 4 changed file (strict), 32 background failed, 2 pending, 31 background not completed.",
)
@click.option("--strict", is_flag=True, default=None, help="With --check, fail (4) if an applied file changed on disk, as 'up --strict' would refuse.")
@tenant_options
@global_options
def status(check: bool, strict: bool | None) -> int:
    """Show every migration and whether it is applied."""
    from ..api.session import per_call  # start-up time: the API loads when a command runs

    s = settings()
    if strict and not check:
        raise ConfigInvalidError("--strict judges what 'status --check' fails on: use it with --check")
    if strict:
        s = s.model_copy(update={"strict": True})
    if (tenants := requested(reading=True)) is not None:
        return _status_across(s, tenants, check)
    rows = run_async(lambda cancel: per_call(s, cancel=cancel).status())
    _render_rows(rows)
    pending = [r.name for r in rows if r.pending]
    mismatched = [r.name for r in rows if r.checksum == "mismatch"]
    out = output()
    if mismatched and not (check and s.strict):  # --check --strict fails on them (4) and says so itself
        out.warn(f"changed after being applied: {', '.join(mismatched)}")
    from ..line.plan import missing_words, status_verdict  # start-up time: the runner loads when a command runs

    missing = [r.name for r in rows if r.state == "missing"]
    if missing and not check:  # --check fails on them (8) and says so itself
        out.warn(missing_words(rows) or "")
    if not out.json_mode:
        applied = sum(r.state == "applied" for r in rows)
        failed = sum(r.state == "failed" for r in rows)  # pending too (up runs them again), but said: the table shows them failed
        out.say(
            f"{applied} applied, {len(pending)} pending"
            + (f" ({failed} failed)" if failed else "")
            + (f", {len(missing)} missing" if missing else "")
        )
    verdict = status_verdict(rows, s) if check else None
    if verdict is not None:
        code, message = verdict
        out.warn(message)
        return int(code)
    return 0


def _status_across(s: Any, tenants: Any, check: bool) -> int:
    """``status --tenants``: per migration file, in how many tenants it is applied, pending, failed; per tenant, its verdict."""
    from ..api import migrations as api  # start-up time: the API loads when a command runs
    from ..api.tenants import judge_status, migration_counts

    def counts_table(report: Any) -> None:
        rows = [(c["migration"], c["applied"], c["pending"], c["failed"], c["other"]) for c in migration_counts(report)]
        output().table(["migration", "applied in", "pending in", "failed in", "other"], rows, title="migrations across tenants")

    return across(
        s, tenants, "status", lambda ms: ms.status(), judge=judge_status(check, s),
        result_json=lambda rows: api.rows_to_json(rows), extra_json=lambda report: {"migrations": migration_counts(report)},
        before_table=counts_table,
    )


@cli.command(name="list")
@click.option("--pending", is_flag=True, help="Only pending migrations.")
@click.option("--applied", is_flag=True, help="Only applied migrations.")
@tenant_options
@global_options
def list_(pending: bool, applied: bool) -> int:
    """List migrations, optionally only pending or applied ones."""
    from ..api.session import per_call  # start-up time: the API loads when a command runs

    if pending and applied:
        raise ConfigInvalidError("--pending and --applied cannot be combined (give neither to list every migration)")
    only: Literal["pending", "applied"] | None = "pending" if pending else "applied" if applied else None
    s = settings()
    if (tenants := requested(reading=True)) is not None:
        from ..api import migrations as api  # start-up time: the API loads when a command runs

        def per_tenant(report: Any) -> None:  # what the command lists, as for one database, with each row's tenant
            listed = [(row.name, r.name, r.shown_state, r.batch, r.applied_at, r.checksum or "") for row in report.rows for r in (row.result or [])]
            if listed:
                output().table(["tenant", "migration", "state", "batch", "applied at", "checksum"], listed, title="migrations by tenant")
            else:
                output().say(f"no {only + ' ' if only else ''}migrations in the selected tenants")

        return across(
            s, tenants, "list", lambda ms: ms.migrations(only), result_json=lambda rows: api.rows_to_json(rows), before_table=per_tenant
        )
    _render_rows(run_async(lambda cancel: per_call(s, cancel=cancel).migrations(only)), only=only)
    return 0


@cli.group(name="dry-run")
@global_options
def dry_run() -> None:
    """Show what up or down would run: same selection, no lock, no writes."""


def _render_dry(report: api.DryRunReport) -> None:
    from ..api import migrations as api  # start-up time: the API loads when a command runs

    out = output()
    for warning in report.warnings:
        out.warn(warning)
    if out.json_mode:
        out.json({"dry_run": api.rows_to_json(report.rows), "warnings": report.warnings, "waiting": report.waiting})
        return
    for item in report.waiting:
        out.warn(f"would stop before {item['migration']}: it waits for {', '.join(item['waits_for'])}")
    if not report.rows:
        out.say("nothing to do")
        return
    out.table(
        ["migration", "direction", "batch", "transaction", "checksum"],
        [(_dry_name(r), r.direction, r.batch, "yes" if r.transaction else "no", r.checksum[:12]) for r in report.rows],
        title="dry run: nothing was written",
    )


def _dry_name(row: api.DryRunRow) -> str:
    """A file a squash replaced runs as part of it: said beside its name."""
    return f"{row.name} (in {row.squashed_into})" if row.squashed_into else row.name


@dry_run.command(name="up")
@click.argument("file", required=False)
@click.option("--to", "to", metavar="NAME")
@click.option("--step", is_flag=True)
@click.option("--force", is_flag=True)
@click.option("--strict", is_flag=True, default=None, help="Refuse, as 'up --strict' would, if an applied file changed on disk.")
@click.option("--batch", "label", type=IntRange(min=1), metavar="N", help=BATCH_LABEL_HELP)  # the bound: api.migrations
@click.option("--ordered", is_flag=True, help=ORDERED_UP_HELP)
@tenant_options
@global_options
def dry_up(file: str | None, to: str | None, step: bool, force: bool, strict: bool | None, label: int | None, ordered: bool) -> int:
    """What 'up' would apply."""
    from ..api.session import per_call  # start-up time: the API loads when a command runs

    s = settings()
    if (tenants := requested(reading=True)) is not None:
        return across(
            s, tenants, "dry-run up",
            lambda ms: ms.plan("up", file, to=to, step=step, force=force, strict=strict or None, batch=label, ordered=ordered),
            judge=_judge_dry, result_json=_dry_json,
        )
    _render_dry(
        run_async(
            lambda cancel: per_call(s, cancel=cancel).plan(
                "up", file, to=to, step=step, force=force, strict=strict or None, batch=label, ordered=ordered
            )
        )
    )
    return 0


@dry_run.command(name="down")
@click.argument("file", required=False)
@click.option("--batch", type=IntRange(min=1))
@click.option("--steps", type=IntRange(min=1))
@click.option("--to", "to", metavar="NAME")
@click.option("--ordered", is_flag=True, help=ORDERED_DOWN_HELP)
@click.option("--strict", is_flag=True, default=None, help="Refuse, as 'down --strict' would, if an applied file changed on disk.")
@tenant_options
@global_options
def dry_down(file: str | None, batch: int | None, steps: int | None, to: str | None, ordered: bool, strict: bool | None) -> int:
    """What 'down' would roll back."""
    from ..api.session import per_call  # start-up time: the API loads when a command runs

    s = settings()
    if (tenants := requested(reading=True)) is not None:
        return across(
            s, tenants, "dry-run down", lambda ms: ms.plan("down", file, batch=batch, steps=steps, to=to, ordered=ordered, strict=strict or None),
            judge=_judge_dry, result_json=_dry_json,
        )
    _render_dry(
        run_async(
            lambda cancel: per_call(s, cancel=cancel).plan("down", file, batch=batch, steps=steps, to=to, ordered=ordered, strict=strict or None)
        )
    )
    return 0


def _judge_dry(report: Any) -> Any:
    """A dry run across tenants: ``applied`` / ``rolled back`` count what the real command would run in that tenant."""
    from ..tenants.report import Judged  # start-up time: loaded when a dry run across tenants is judged

    ups = sum(1 for r in report.rows if r.direction == "up")
    return Judged("done" if report.rows else "already at target", applied=ups, rolled_back=len(report.rows) - ups, result=report)


def _dry_json(report: Any) -> dict[str, Any]:
    from ..api import migrations as api  # start-up time: the API loads when a command runs

    return {"dry_run": api.rows_to_json(report.rows), "warnings": report.warnings, "waiting": report.waiting}


# ---------------------------------------------------------------- the lock


@cli.command()
@tenant_options
@global_options
def lock() -> int:
    """Show who holds the migration lock."""
    from ..api.session import per_call  # start-up time: the API loads when a command runs

    s = settings()
    if (tenants := requested(reading=True)) is not None:
        def holders(report: Any) -> None:
            rows = [(r.name, _holder_text(r.result) if r.result is not None else ("free" if r.ok else "")) for r in report.rows]
            output().table(["tenant", "lock"], rows)

        return across(
            s, tenants, "lock", lambda ms: ms.lock_status(), scan=False,
            result_json=lambda holder: {"held": True, "holder": _holder_json(holder)}, before_table=holders,
        )
    holder = run_async(lambda cancel: per_call(s, cancel=cancel).lock_status())
    out = output()
    if out.json_mode:
        out.json({"held": holder is not None, "holder": _holder_json(holder) if holder else None})
    else:
        out.say("the lock is free" if holder is None else f"held by {_holder_text(holder)}")
    return 0


def _holder_json(holder: Any) -> dict[str, Any]:
    """A holder as ``lock --json`` shows it: its fields, and ``gone`` (its process provably no longer runs on
    this host, so the next run takes it over), the fact the text says, which a script should not have to parse."""
    return {**holder.__dict__, "gone": holder.gone()}


def _holder_text(holder: Any) -> str:
    """A holder as ``lock`` shows it, for one database or a tenant's row: a dead holder of this host is said to be
    taken over by the next run (across tenants the row said only who held it)."""
    gone = not holder.expired and holder.gone()
    return str(holder.describe()) + ("; that process no longer runs on this host: the next run takes it over" if gone else "")


@cli.command()
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@tenant_options
@global_options
def unlock(yes: bool) -> int:
    """Clear a stuck migration lock (for example after a run was killed)."""
    from ..api.session import per_call  # start-up time: the API loads when a command runs

    s = settings()
    if (tenants := requested(reading=True)) is not None:
        from ..tenants.report import Judged  # start-up time: loaded only when a command runs across tenants

        confirm("Clear the migration lock of every selected tenant, whoever holds it?", yes)
        return across(
            s, tenants, "unlock", lambda ms: ms.unlock(), scan=False,
            judge=lambda holder: Judged("done" if holder is not None else "already at target", result=holder),
            result_json=lambda holder: {"cleared": True, "holder": holder.__dict__},
        )
    holder = run_async(lambda cancel: per_call(s, cancel=cancel).lock_status())
    out = output()
    if holder is None:
        if out.json_mode:
            out.json({"cleared": False, "holder": None})
        else:
            out.say("the lock is free: nothing to clear")
        return 0
    confirm(f"Clear the lock held by {holder.describe()}?", yes)
    cleared = run_async(lambda cancel: per_call(s, cancel=cancel).unlock())
    if out.json_mode:
        out.json({"cleared": cleared is not None, "holder": cleared.__dict__ if cleared else None})
    else:
        out.say("lock cleared" if cleared else "the lock was already gone")
    return 0


@cli.command(name="run-log")
@click.argument("run_id")
@global_options
def run_log(run_id: str) -> int:
    """Show the ctx.log lines a run stored, in order, with their level (RUN_ID: a run report's run_id)."""
    from ..api.session import per_call  # start-up time: the API loads when a command runs

    s = settings()
    lines = run_async(lambda cancel: per_call(s, cancel=cancel).run_log(run_id))
    out = output()
    if out.json_mode:
        out.json({"run_id": run_id, "lines": [line.to_json() for line in lines]})
    elif not lines:
        out.say("no log line is stored for this run (it logged none, its lines expired, or no run has this id)")
    else:
        rows = [(line.seq, line.at, line.migration or "", line.level, line.message) for line in lines]
        out.table(["#", "at", "migration", "level", "message"], rows, title=f"run {run_id}")
    return 0


# ---------------------------------------------------------------- embedded server and demo


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, callback=listen_host)
@click.option("--port", type=IntRange(0, 65535), default=27017, show_default=True, help="0 picks a free port.")
@click.option("--path", type=click.Path(path_type=Path), help="Snapshot file: data survives a clean restart.")
@click.option("--change-history", type=IntRange(min=1), default=100_000, show_default=True, help="Change-stream window, in events.")
@click.option(
    "--standalone",
    is_flag=True,
    help="Serve a standalone mongod instead of a single-node replica set (no transactions, retryable writes or change streams).",
)
@json_option
def embedded(host: str, port: int, path: Path | None, change_history: int, standalone: bool) -> int:
    """Run a MongoDB-compatible server (mongoeco) for local work; prints its URI first."""
    import gc
    import logging

    # the embedded server needs the optional mongoeco extra: only this command and demo load it
    from ..embedded.server import AddressUnavailable, EmbeddedServerUnavailable, print_uri, run
    from ..embedded.snapshot import SnapshotError, SnapshotIOError

    handler = logging.StreamHandler(sys.stderr)
    if options().get("log_format") == "json":  # every stderr line one JSON object, the server's own lines too
        from .log_format import JsonLineFormatter

        handler.setFormatter(JsonLineFormatter())
    else:
        handler.setFormatter(logging.Formatter("mongoshift embedded: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    # --json: its one document is where it serves, written (and flushed) once it listens; the plain URI line otherwise
    # (no Output here: it would set up the "mongoshift" logger's own format over the server's lines)
    ready = (lambda uri: Output.emit_json({"uri": uri})) if options().get("json") else print_uri
    try:
        code = run(host=host, port=port, path=path, change_history=change_history, standalone=standalone, on_ready=ready)
        # The process ends next, and the interpreter's last collection would walk every object the server held
        # (seconds at 100,000 documents after "stopping"): frozen, they are left to the process's end.
        gc.freeze()
        return code
    except AddressUnavailable as exc:
        raise AddressInUseError(str(exc), host=exc.host, port=exc.port, reason=exc.reason) from None
    except SnapshotIOError as exc:
        raise IOFailedError(str(exc), path=str(exc.path), reason=exc.reason) from None
    except (EmbeddedServerUnavailable, SnapshotError) as exc:
        raise ConfigInvalidError(str(exc)) from None


@cli.command()
@global_options
def demo() -> None:
    """Start the embedded server, create a sample project, apply it and show the status."""
    from .demo import run_demo  # starts the embedded server (the optional mongoeco extra)

    # The demo runs on a server and a project of its own: a connection or project flag would be silently ignored,
    # and whoever passed --uri of their own server would believe the walkthrough ran there.
    ignored = [f"--{name.replace('_', '-')}" for name in ("uri", "db", "dir", "config", "env_file", "no_env") if options().get(name)]
    if ignored:
        raise ConfigInvalidError(
            f"demo runs its own embedded server and sample project in a temporary folder: {', '.join(ignored)} would be ignored; "
            "run it without, or follow the README's 'A project in five commands' against your server"
        )
    run_demo(output())




def _fail(error: MongoshiftError, args: list[str], cause: BaseException | None = None) -> None:
    """Report ``error`` (one JSON document with --json) and exit with its code; -v adds the traceback."""
    if cause is not None and ("-v" in args or "--verbose" in args):
        # A driver error's text ends its traceback and quotes documents (``dup key: {...}``): cleaned as a logged one is.
        text = redact("".join(traceback.format_exception(cause)), limit=20_000)
        if _log_json(args):  # every stderr line one JSON object, this one too
            from .log_format import json_line  # start-up time: loaded only to report a failure

            print(json_line("debug", "the failure's traceback", traceback=text), file=sys.stderr)
        else:
            print(text, file=sys.stderr, end="")
    Output(json_mode="--json" in args, quiet=True, log_json=_log_json(args)).error(error)
    sys.exit(error.exit_code)


_NUMBER = re.compile(r"-[0-9.][0-9.eE+-]*")


def _negative_value(exc: click.exceptions.UsageError, args: list[str]) -> str | None:
    """``--wait -1`` and ``--wait=-1``: click reads an option whose value may be left out (``--wait``
    alone waits 600 s) as given alone when what follows starts with ``-``, then ``-1`` as an unknown
    option. Said as the option's own refusal of the value, not "No such option '-1'"."""
    if not isinstance(exc, click.exceptions.NoSuchOption) or exc.ctx is None:
        return None
    for i, arg in enumerate(args):
        flag, equals, value = arg.partition("=")
        given = value if equals else next(iter(args[i + 1 : i + 2]), "")
        # click names "-0" for "-0.5" (it reads short options one character at a time)
        if not flag.startswith("--") or not _NUMBER.fullmatch(given) or not given.startswith(exc.option_name):
            continue
        option = next((p for p in exc.ctx.command.params if isinstance(p, click.Option) and flag in p.opts), None)
        if option is None:
            continue
        try:
            option.type.convert(given, option, exc.ctx)
        except click.BadParameter as refused:
            return refused.format_message()
    return None


def _log_json(args: list[str]) -> bool:
    """``--log-format json`` among the arguments (the error of a failed command is a JSON line too)."""
    return "--log-format=json" in args or any(a == "--log-format" and b == "json" for a, b in itertools.pairwise(args))


def _driver_error(exc: BaseException | None) -> TypeIs[PyMongoError]:
    """Whether ``exc`` is one of pymongo's errors; none can be while the driver is not even loaded
    (start-up time: this module does not import it, see the note at the top)."""
    errors = sys.modules.get("pymongo.errors")
    return exc is not None and errors is not None and isinstance(exc, errors.PyMongoError)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    guard_stdout()
    code: str | int | None = 0
    try:
        try:
            _main(args)
        except KeyboardInterrupt:  # a Ctrl-C past every handler: while starting, or while a first one's failure is said
            _stopped_at_once(args)
    except SystemExit as done:
        code = done.code
    finally:
        release_stdout()  # --json kept stdout for its document until the very end (the error too)
        failure = unguard_stdout()
    if failure is not None:  # what the command did stands; its report did not reach stdout
        Output(quiet=True, log_json=_log_json(args)).error(IOFailedError.from_os(failure, "write", "stdout"))
        if code in (0, None):
            code = ExitCode.IO_FAILED
    sys.exit(code)


def not_utf8(exc: UnicodeEncodeError) -> ConfigInvalidError:
    """Bytes that were not UTF-8 (an argument, a file name) reached something that must be text: a name or
    id sent to MongoDB, a line printed. Where they came from is the input's, not a bug: the refusal quotes
    them with their neighbours, or alone where the neighbours may be a URI's user and password."""
    near = escape_undecodable(exc.object[max(exc.start - 40, 0) : exc.end + 40])
    if any(mark in near.lower() for mark in ("@", ":", "password", "secret", "token")):
        near = escape_undecodable(exc.object[exc.start : exc.end])
    return ConfigInvalidError(f"not UTF-8 text: '{near}' (names and ids sent to MongoDB, and what is printed, must be)")


def _main(args: list[str]) -> None:
    try:
        result = cli.main(args=args, prog_name="mongoshift", standalone_mode=False)
    except click.exceptions.Abort as exc:  # a "no" at a prompt, or a Ctrl-C before (or after) the run's own signal handler is in place
        # every failure one JSON document (rich is not loaded for it: a second Ctrl-C may be near); a Ctrl-C that came
        # after the command wrote its document (once its run ended, while it was exiting) adds no second one
        said = "aborted (SIGINT)" if isinstance(exc.__cause__, KeyboardInterrupt) else "aborted"
        if "--json" in args and not document_written():
            Output.emit_json({"error": RunAbortedError(said).to_json()})
        print(_error_line(args, said, "aborted", ExitCode.ABORTED), file=sys.stderr)
        sys.exit(ExitCode.ABORTED)
    except click.exceptions.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        # It quotes the arguments, as given: cleaned as every error is (a 100 KB value, a URI in the wrong flag).
        # A group named without its command: click's message is the whole help text, not one line.
        said = "Missing command." if isinstance(exc, click.exceptions.NoArgsIsHelpError) else _negative_value(exc, args) or exc.format_message()
        message = redact(elide_long_words(said), limit=10_000)
        error = ConfigInvalidError(message)
        if "--json" in args:
            Output(json_mode=True).json({"error": error.to_json()})
        if _log_json(args):  # every stderr line one JSON object, this one too
            Output(quiet=True, log_json=True).error(ConfigInvalidError(message + hint))
        else:
            print(f"error: {message}", file=sys.stderr)
            if hint:
                print(hint.strip(), file=sys.stderr)
        sys.exit(error.exit_code)
    except click.exceptions.ClickException as exc:
        exc.show()
        sys.exit(ExitCode.CONFIG_INVALID)
    except MongoshiftError as exc:
        _fail(exc, args, exc.__cause__ if _driver_error(exc.__cause__) and not exc.traceback_logged else None)
    except KeyboardInterrupt:
        _stopped_at_once(args)
    except OSError as exc:  # the system refused a file or folder where no command expected it
        if exc.filename is None:
            _unexpected(exc, args)
        _fail(IOFailedError.from_os(exc, "use", exc.filename), args, exc)
    except UnicodeEncodeError as exc:
        if exc.reason != "surrogates not allowed":
            _unexpected(exc, args)
        _fail(not_utf8(exc), args, exc)
    except Exception as exc:  # a bug: still one JSON document and a stable code; the traceback with -v
        if _driver_error(exc):
            from ..project.server_errors import from_pymongo  # start-up time: loaded only for a driver error

            _fail(from_pymongo(exc), args, exc)
        _unexpected(exc, args)
    except BaseException as exc:  # no Exception (GeneratorExit, the project's own): past every guard, still one document
        if isinstance(exc, SystemExit):
            raise
        _unexpected(exc, args)
    sys.exit(result if isinstance(result, int) else 0)


def _error_line(args: list[str], message: str, kind: str, code: int, *, plain: str | None = None) -> str:
    """The stderr line of a failure said without :class:`Output` (rich is not loaded for it: a second Ctrl-C
    may be near): under ``--log-format json`` one JSON object, as every other failure's line."""
    if _log_json(args):
        from .log_format import json_line

        return json_line("error", message, kind=kind, code=int(code))
    return plain if plain is not None else f"error: {message}"


def _stopped_at_once(args: list[str]) -> None:
    """A Ctrl-C that no command's own signal handler took (the process was starting, or was saying how a first
    one ended): the second signal's exit, 130, without a traceback, and under ``--json`` still one document."""
    message = "stopped at once by a second SIGINT"
    try:
        if "--json" in args and not document_written():
            Output.emit_json({"error": {"code": int(ExitCode.SECOND_SIGNAL), "kind": "second_signal", "message": message}})
        print(_error_line(args, message, "second_signal", ExitCode.SECOND_SIGNAL, plain=f"mongoshift: {message}"), file=sys.stderr)
    except KeyboardInterrupt:  # yet another one: the exit is all that is left to do
        pass
    sys.exit(ExitCode.SECOND_SIGNAL)


def _unexpected(exc: BaseException, args: list[str]) -> None:
    """A bug: still one JSON document and a stable code (1); the traceback with -v."""
    hint = "" if "-v" in args or "--verbose" in args else " (run again with -v for the traceback, and please report it)"
    _fail(MongoshiftError(f"unexpected {type(exc).__name__}{hint}"), args, exc)


cli.add_command(audit_command)
cli.add_command(import_command)
cli.add_command(baseline_command)
cli.add_command(background_group)
cli.add_command(converge_command)
cli.add_command(collections_group)
cli.add_command(squash_command)
cli.add_command(lint_command)
cli.add_command(dashboard_command)
