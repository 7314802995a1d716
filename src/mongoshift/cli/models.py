"""``mongoshift collections generate`` and ``mongoshift create --from-models``: from the application's models."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..errors import ExitCode
from ..project.wording import plural
from .app import global_options, output, run_async, settings
from .output import shown_path

if TYPE_CHECKING:
    from ..models.generate import GenerateReport

MODELS_HELP = "The models package, such as myapp.models (default: the one the snapshot recorded)."
#: What the first Ctrl-C makes a models command do: it holds no lock and runs no migration ("ctx.cancelled" is a
#: migration's); the models' import is not interrupted, and nothing is written after it.
STOPPING = "stopping: nothing is written once the models are imported (press Ctrl-C again to stop now)"


def left_behind(command: str) -> str:
    """What a second signal leaves: files are written whole (a temporary file, then a rename) before the snapshot,
    and the next run reads them into it (docs/models.md); no lock, no migration run."""
    return f"no file is left half-written; those already written stay, and the next '{command}' completes the models snapshot from them"


@click.group(name="collections")
@global_options
def collections_group() -> None:
    """Declared collections derived from the application's models (docs/models.md)."""


@collections_group.command(name="generate")
@click.option("--models", "models", metavar="PKG", help=MODELS_HELP)
@click.option("--check", is_flag=True, help="Write nothing; exit 48 when the declarations differ from what the models give (for CI).")
@global_options
def generate_command(models: str | None, check: bool) -> int:
    """Write the declared-collections files the models give; hand edits are kept, the difference is shown."""
    from ..api.models import generate_collections  # start-up time: the models readers load only when this command runs

    s = settings()
    report = run_async(
        lambda cancel: generate_collections(s, models, check=check, cancel=cancel), stopping=STOPPING, left_behind=left_behind("collections generate")
    )
    render(report)
    if check and not report.in_sync:
        output().warn("the declarations differ from the models: run 'mongoshift collections generate' and commit the result")
        return int(ExitCode.MODELS_DRIFT)
    return 0


def render(report: GenerateReport) -> None:
    out = output()
    for result in report.collections:
        for line in result.unsupported:
            out.warn(f"not expressed in the declaration: {line}")
        for line in result.kept:
            out.warn(f"{result.collection}: {line}")
    for name in report.orphaned:
        out.warn(f"{name}: no model gives this collection any more; its file is left as it is (delete it to stop declaring it)")
    if out.json_mode:
        out.json(report.to_json())
        return
    for result in report.collections:
        if result.diff:
            out.say(result.diff.rstrip("\n"))
    verb = "would be" if report.check else ""
    rows = [(r.collection, r.model, r.action if not report.check or r.action == "unchanged" else f"{r.action} ({verb} written)", shown_path(r.file))
            for r in report.collections]
    out.table(["collection", "model", "action", "file"], rows, title="check: nothing was written" if report.check else None)
    if report.snapshot_stale:
        out.say(f"models snapshot {'is out of date' if report.check else 'updated'}: {shown_path(report.snapshot)}")
    if report.in_sync:
        out.say(f"in sync: {plural(len(report.collections), 'collection')} as the models give them")


def create_from_models(name: str, models: str | None) -> None:
    """``create NAME --from-models``: a background migration per collection whose shape changed."""
    from ..api.models import create_from_models as create  # start-up time: the models readers load only when this command runs

    s = settings()
    out = output()
    report = run_async(lambda cancel: create(s, name, models, cancel=cancel), stopping=STOPPING, left_behind=left_behind("create --from-models"))
    for change in report.plan.changes:
        for note in change.notes:
            out.say(f"{change.collection}: {note}")
    for collection in report.plan.new_collections:
        out.say(f"{collection}: first seen; its shape is recorded (nothing to migrate)")
    if out.json_mode:
        out.json(report.to_json())
        return
    for path in report.files:
        out.say(f"created {shown_path(path)}")
    if not report.files:
        noted = any(change.notes for change in report.plan.changes) or report.plan.new_collections
        out.say(
            "no stored document needs rewriting for the changes above: no migration written"
            if noted else "no data-shape change since the models snapshot: no migration written"
        )
