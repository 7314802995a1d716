"""Which tenants a command acts on: the [tenants] section, the flags, the order, and every refusal (exit 46)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mongoshift.errors import ConfigInvalidError, ExitCode, TenantsInvalidError
from mongoshift.project.settings import Settings, load_settings
from mongoshift.tenants.rollout import Rollout
from mongoshift.tenants.selection import FLAG_WORDS, Tenant, TenantFlags, select

SERVER = ["admin", "local", "config", "tenant_b", "tenant_a", "other", "tenant_c"]


async def names() -> list[str]:
    return list(SERVER)


def settings(**tenants: object) -> Settings:
    return Settings(uri="mongodb://h", tenants=tenants or None)  # type: ignore[arg-type]


def picked(tenants: list[Tenant]) -> list[str]:
    return [t.name for t in tenants]


async def test_a_glob_never_selects_the_servers_own_databases() -> None:
    everything = await select(settings(match="*"), TenantFlags(all=True), names)
    assert picked(everything) == ["other", "tenant_a", "tenant_b", "tenant_c"]  # sorted, no admin/local/config
    assert picked(await select(Settings(uri="mongodb://h"), TenantFlags(pattern="*"), names)) == ["other", "tenant_a", "tenant_b", "tenant_c"]
    assert picked(await select(settings(match="tenant_*"), TenantFlags(all=True), names)) == ["tenant_a", "tenant_b", "tenant_c"]


async def test_listed_databases_run_sorted_and_flags_narrow_them() -> None:
    s = settings(databases=["zeta", "alpha", "mid"])
    assert picked(await select(s, TenantFlags(all=True), names)) == ["alpha", "mid", "zeta"]
    assert picked(await select(s, TenantFlags(names=("zeta", "alpha")), names)) == ["alpha", "zeta"]
    assert picked(await select(s, TenantFlags(pattern="*a"), names)) == ["alpha", "zeta"]


async def test_names_without_a_section_are_taken_as_given_sorted() -> None:
    assert picked(await select(Settings(uri="mongodb://h"), TenantFlags(names=("b1", "a1")), names)) == ["a1", "b1"]


@pytest.mark.parametrize(
    ("section", "flags", "text"),
    [
        ({"databases": ["a", "b"]}, TenantFlags(names=("a", "nope")), "not a tenant of the [tenants] selection: nope"),
        ({"databases": ["a", "b"]}, TenantFlags(pattern="z*"), "matches none of the [tenants] selection"),
        ({}, TenantFlags(pattern="z*"), "matches none of the server's databases"),
        ({"match": "nothing_*"}, TenantFlags(all=True), "matches none of the server's databases"),
        ({}, TenantFlags(all=True), "Tenants(all=True) needs a [tenants] section"),  # the API's words by default
        ({}, TenantFlags(all=True, words=FLAG_WORDS), "--all-tenants needs a [tenants] section"),  # the command line's
        ({}, TenantFlags(pattern="z*", words=FLAG_WORDS), "--tenants 'z*' matches none of the server's databases"),
        ({}, TenantFlags(names=("a",), pattern="a*"), "Tenants(names=...) and Tenants(pattern=...) cannot be combined"),
        ({}, TenantFlags(names=("a",), all=True), "cannot be combined"),
        ({}, TenantFlags(names=("a", "a")), "given twice"),
        ({}, TenantFlags(names=("a.b",),), "MongoDB refuses"),
        ({}, TenantFlags(names=("local",),), "never a project's or a tenant's"),
        ({}, TenantFlags(names=("x" * 64,),), "at most 63 bytes"),
        # the API's Tenants() (or names=[] from an empty list): every tenant of the section ran, or an AssertionError
        ({"databases": ["a", "b"]}, TenantFlags(), "no tenant selected: give names, a pattern or all=True"),
        ({}, TenantFlags(names=()), "no tenant selected: give names, a pattern or all=True"),
    ],
)
async def test_bad_selections_are_refused_with_exit_46(section: dict[str, object], flags: TenantFlags, text: str) -> None:
    with pytest.raises(TenantsInvalidError) as raised:
        await select(settings(**section), flags, names)
    assert text in raised.value.message
    assert raised.value.exit_code == ExitCode.TENANTS_INVALID == 46


@pytest.mark.parametrize(
    ("rollout", "selected", "text"),
    [
        (Rollout(parallel=0), 3, "Tenants(parallel=...) must be"),
        (Rollout(parallel=-2), 3, "Tenants(parallel=...) must be"),
        (Rollout(canary=4), 3, "Tenants(canary=...) 4 is more than the 3 selected tenants"),
        (Rollout(canary=-1), 3, "Tenants(canary=...) must be"),
    ],
)
def test_bad_rollout_options_are_refused_before_anything_runs(rollout: Rollout, selected: int, text: str) -> None:
    with pytest.raises(TenantsInvalidError) as raised:
        rollout.check(selected)
    assert text in raised.value.message and raised.value.exit_code == 46


def test_the_section_takes_exactly_one_way_and_valid_names(tmp_path: Path) -> None:
    config = tmp_path / "mongoshift.toml"
    config.write_text('[mongoshift]\nuri = "mongodb://h"\n[mongoshift.tenants]\ndatabases = ["a"]\nmatch = "t_*"\n', encoding="utf-8")
    with pytest.raises(ConfigInvalidError, match="exactly one of databases, match or provider"):
        load_settings(config_path=config, environ={})
    config.write_text('[mongoshift]\nuri = "mongodb://h"\n[mongoshift.tenants]\ndatabases = ["a", "b$c"]\n', encoding="utf-8")
    with pytest.raises(ConfigInvalidError, match="MongoDB refuses"):
        load_settings(config_path=config, environ={})
    config.write_text('[mongoshift]\nuri = "mongodb://h"\n[mongoshift.tenants]\nmatch = "t_*"\nwhere = 1\n', encoding="utf-8")
    with pytest.raises(ConfigInvalidError, match="unknown key"):
        load_settings(config_path=config, environ={})
    config.write_text('[mongoshift]\nuri = "mongodb://h"\n[mongoshift.tenants]\nprovider = "pkg.mod:fn"\n', encoding="utf-8")
    assert load_settings(config_path=config, environ={}).tenants is not None


def test_a_list_of_non_names_is_not_also_said_to_be_empty(tmp_path: Path) -> None:
    """``databases = [1]`` was refused as "Input should be a valid string; ... must not be empty": pydantic counts the
    list after dropping the item it refused, and the second half blamed a list that has an item."""
    config = tmp_path / "mongoshift.toml"
    config.write_text('[mongoshift]\nuri = "mongodb://h"\n[mongoshift.tenants]\ndatabases = [1]\n', encoding="utf-8")
    with pytest.raises(ConfigInvalidError) as raised:
        load_settings(config_path=config, environ={})
    assert "'tenants.databases[0]'" in raised.value.message and "empty" not in raised.value.message, raised.value.message
    config.write_text('[mongoshift]\nuri = "mongodb://h"\n[mongoshift.tenants]\ndatabases = []\n', encoding="utf-8")
    with pytest.raises(ConfigInvalidError, match=r"'tenants\.databases' from .*: must not be empty"):
        load_settings(config_path=config, environ={})


# ---------------------------------------------------------------- providers


@pytest.fixture
def provider_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """``provider_module(source)``: a module importable as ``tenant_source_N`` holding ``source``; its spec prefix."""
    monkeypatch.syspath_prepend(str(tmp_path))
    counter = iter(range(1000))

    def write(source: str) -> str:
        name = f"tenant_source_{next(counter)}_{tmp_path.name.replace('-', '_')}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        return name

    return write


async def test_a_sync_provider_keeps_its_order_and_gets_the_settings(provider_module) -> None:  # type: ignore[no-untyped-def]
    module = provider_module("""
        def tenants(settings):
            assert settings.uri == "mongodb://h"
            return ["zeta", "alpha"]
    """)
    chosen = await select(settings(provider=f"{module}:tenants"), TenantFlags(all=True), names)
    assert picked(chosen) == ["zeta", "alpha"]  # the provider's order, not sorted
    assert picked(await select(settings(provider=f"{module}:tenants"), TenantFlags(names=("alpha", "zeta")), names)) == ["zeta", "alpha"]


async def test_an_async_provider_may_place_tenants_on_another_cluster(provider_module) -> None:  # type: ignore[no-untyped-def]
    module = provider_module("""
        async def tenants(settings):
            return ["here", ("there", "mongodb://other:27017")]
    """)
    chosen = await select(settings(provider=f"{module}:tenants"), TenantFlags(all=True), names)
    assert chosen == [Tenant("here"), Tenant("there", "mongodb://other:27017")]


@pytest.mark.parametrize(
    ("source", "text"),
    [
        ("def tenants(settings):\n    raise RuntimeError('no tenants table')\n", "failed: RuntimeError"),
        ("def tenants(settings):\n    return ['a', 7]\n", "item 1: a database name must be text, not int"),
        ("def tenants(settings):\n    return ['a', 'b', 'a']\n", "returned twice: a"),
        ("def tenants(settings):\n    return ['ok', 'bad/name']\n", "item 1: MongoDB refuses '/'"),
        ("def tenants(settings):\n    return ['admin']\n", "item 0: admin is the server's own database"),
        ("def tenants(settings):\n    return 'tenant_a'\n", "returned str"),
        ("def tenants(settings):\n    return []\n", "returned no tenants"),
        ("def tenants(settings):\n    return [('a', 'http://x')]\n", "its uri must be a mongodb://"),
        ("tenants = 3\n", "is not a function"),
        ("import no_such_module_here\n", "failed to import"),
    ],
)
async def test_a_provider_that_misbehaves_gets_a_clear_error(provider_module, source: str, text: str) -> None:  # type: ignore[no-untyped-def]
    module = provider_module(source)
    with pytest.raises(TenantsInvalidError) as raised:
        await select(settings(provider=f"{module}:tenants"), TenantFlags(all=True), names)
    assert text in raised.value.message and raised.value.exit_code == 46


async def test_a_provider_path_that_does_not_exist_is_named() -> None:
    with pytest.raises(TenantsInvalidError, match=r"provider no_such_pkg\.tenants:names failed to import"):
        await select(settings(provider="no_such_pkg.tenants:names"), TenantFlags(all=True), names)
    with pytest.raises(TenantsInvalidError, match="os has no no_such_function"):
        await select(settings(provider="os:no_such_function"), TenantFlags(all=True), names)
