from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from mongoshift.errors import (
    ChecksumMismatchError,
    ConfigInvalidError,
    FileNotFoundMigrationError,
    NotAppliedError,
    OutOfOrderError,
)
from mongoshift.line.plan import plan_down, plan_up, status_rows
from mongoshift.project.changelog import ChangelogRecord
from mongoshift.project.loader import MigrationFile, checksum

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def files(tmp_path: Path, n: int) -> list[MigrationFile]:
    out = []
    for i in range(1, n + 1):
        p = tmp_path / f"{i:04d}_m{i}.py"
        p.write_text(f"def up(ctx): pass  # {i}\n")
        out.append(MigrationFile(p.name, p))
    return out


def applied(f: MigrationFile, batch: int, minute: int) -> ChangelogRecord:
    return ChangelogRecord(f.name, "applied", batch=batch, checksum=checksum(f.path), applied_at=T0 + timedelta(minutes=minute))


def test_up_selects_pending_in_order_and_to_is_inclusive(tmp_path: Path) -> None:
    fs = files(tmp_path, 4)
    records = {fs[0].name: applied(fs[0], 1, 0)}
    assert [s.name for s in plan_up(fs, records).steps] == [f.name for f in fs[1:]]
    assert [s.name for s in plan_up(fs, records, to=fs[2].name).steps] == [fs[1].name, fs[2].name]


def test_up_single_file_applied_is_skipped_unless_forced(tmp_path: Path) -> None:
    fs = files(tmp_path, 2)
    records = {fs[0].name: applied(fs[0], 1, 0)}
    plan = plan_up(fs, records, target=fs[0].name)
    assert plan.steps == [] and plan.skipped[0][0] == fs[0].name
    assert [s.name for s in plan_up(fs, records, target=fs[0].name, force=True).steps] == [fs[0].name]
    with pytest.raises(ConfigInvalidError):
        plan_up(fs, records, force=True)


def test_out_of_order_policies(tmp_path: Path) -> None:
    fs = files(tmp_path, 3)
    records = {fs[2].name: applied(fs[2], 1, 0)}
    assert "out of order" in plan_up(fs, records).warnings[0]
    assert plan_up(fs, records, out_of_order="allow").warnings == []
    with pytest.raises(OutOfOrderError):
        plan_up(fs, records, out_of_order="error")


def test_strict_checksum(tmp_path: Path) -> None:
    fs = files(tmp_path, 2)
    records = {fs[0].name: applied(fs[0], 1, 0)}
    fs[0].path.write_text("def up(ctx): pass  # edited\n")
    assert "checksum mismatch" in plan_up(fs, records).warnings[0]
    with pytest.raises(ChecksumMismatchError):
        plan_up(fs, records, strict=True)
    assert status_rows(fs, records)[0].checksum == "mismatch"


def test_down_selectors(tmp_path: Path) -> None:
    fs = files(tmp_path, 4)
    records = {f.name: applied(f, 1 if i < 2 else 2, i) for i, f in enumerate(fs)}
    assert [s.name for s in plan_down(fs, records).steps] == [fs[3].name, fs[2].name]
    assert [s.name for s in plan_down(fs, records, batch=1).steps] == [fs[1].name, fs[0].name]
    assert [s.name for s in plan_down(fs, records, steps=3).steps] == [fs[3].name, fs[2].name, fs[1].name]
    assert [s.name for s in plan_down(fs, records, to=fs[1].name).steps] == [fs[3].name, fs[2].name]
    with pytest.raises(NotAppliedError):
        plan_down(fs, {}, target=fs[0].name)
    with pytest.raises(ConfigInvalidError):
        plan_down(fs, records, batch=1, steps=1)
    with pytest.raises(FileNotFoundMigrationError):
        plan_down(fs[:2], records)


def test_ordered_up_waits_for_every_earlier_file_a_failed_one_included(tmp_path: Path) -> None:
    fs = files(tmp_path, 3)
    failed = ChangelogRecord(fs[0].name, "failed", batch=1)
    with pytest.raises(OutOfOrderError) as raised:
        plan_up(fs, {fs[0].name: failed}, target=fs[2].name, ordered=True)
    assert raised.value.details["blocked_by"] == [fs[0].name, fs[1].name]
    records = {fs[0].name: applied(fs[0], 1, 0), fs[1].name: applied(fs[1], 1, 1)}
    assert [s.name for s in plan_up(fs, records, target=fs[2].name, ordered=True).steps] == [fs[2].name]
    assert plan_up(fs, records, target=fs[1].name, ordered=True).skipped[0][0] == fs[1].name  # a replayed job
    with pytest.raises(ConfigInvalidError):
        plan_up(fs, records, ordered=True)  # --ordered needs a FILE


def test_ordered_up_keeps_the_out_of_order_policy_a_plain_single_file_run_ignores(tmp_path: Path) -> None:
    fs = files(tmp_path, 3)
    records = {fs[0].name: applied(fs[0], 1, 0), fs[2].name: applied(fs[2], 1, 1)}
    with pytest.raises(OutOfOrderError):
        plan_up(fs, records, target=fs[1].name, ordered=True, out_of_order="error")
    assert "out of order" in plan_up(fs, records, target=fs[1].name, ordered=True).warnings[0]


def test_ordered_down_only_from_the_end_of_the_line(tmp_path: Path) -> None:
    fs = files(tmp_path, 3)
    records = {f.name: applied(f, 1, i) for i, f in enumerate(fs[:2])}
    records[fs[2].name] = ChangelogRecord(fs[2].name, "reverted", batch=1)  # not applied: does not block
    with pytest.raises(OutOfOrderError) as raised:
        plan_down(fs, records, target=fs[0].name, ordered=True)
    assert raised.value.details["blocked_by"] == [fs[1].name]
    assert [s.name for s in plan_down(fs, records, target=fs[1].name, ordered=True).steps] == [fs[1].name]
    assert [s.name for s in plan_down(fs, records, target=fs[0].name).steps] == [fs[0].name]  # without --ordered
    with pytest.raises(ConfigInvalidError):
        plan_down(fs, records, ordered=True)


@given(st.lists(st.booleans(), min_size=1, max_size=12))
def test_up_then_everything_is_applied(flags: list[bool]) -> None:
    """Whatever is applied already, up selects exactly the rest, in order."""
    tmp = Path(__import__("tempfile").mkdtemp())
    fs = files(tmp, len(flags))
    records = {f.name: applied(f, 1, i) for i, (f, on) in enumerate(zip(fs, flags, strict=True)) if on}
    chosen = [s.name for s in plan_up(fs, records, out_of_order="allow").steps]
    assert chosen == sorted(chosen)
    assert set(chosen) | set(records) == {f.name for f in fs}
    assert not set(chosen) & set(records)


def test_down_refuses_records_mongoshift_never_ran(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Imported and baseline records are forward-only: every selector of down (and so redo and dry-run
    down, which plan through it) refuses them with exit 13, naming them."""
    from mongoshift.errors import IrreversibleMigrationError
    from mongoshift.line.plan import plan_down
    from mongoshift.project.changelog import ChangelogRecord
    from mongoshift.project.loader import MigrationFile

    files = []
    for name in ("0001_a.py", "0002_b.py", "0003_c.py"):
        (tmp_path / name).write_text("def up(ctx):\n    pass\n")
        files.append(MigrationFile(name, tmp_path / name))
    records = {
        "0001_a.py": ChangelogRecord("0001_a.py", "applied", batch=1, origin="migrate-mongo"),
        "0002_b.py": ChangelogRecord("0002_b.py", "applied", batch=2, origin="baseline"),
        "0003_c.py": ChangelogRecord("0003_c.py", "applied", batch=3),
    }
    assert [s.name for s in plan_down(files, records).steps] == ["0003_c.py"]
    for selector in ({"target": "0001_a"}, {"batch": 2}, {"steps": 2}, {"to": "0001_a.py"}):
        with pytest.raises(IrreversibleMigrationError) as info:
            plan_down(files, records, **selector)
        assert info.value.exit_code == 13 and "never ran" in info.value.message
    from mongoshift.line.plan import status_rows

    assert [r.shown_state for r in status_rows(files, records)] == ["applied (migrate-mongo)", "applied (baseline)", "applied"]
