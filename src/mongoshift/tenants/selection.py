"""Which tenant databases a command acts on, in a stable order, or a clear refusal (exit 46).

The configured selection comes from ``[tenants]`` (:class:`~mongoshift.schema.tenants.TenantsDeclaration`):
``databases`` (sorted), ``match`` (a glob over the server's databases, sorted, never admin,
local or config) or ``provider`` (its order). The command line narrows or replaces it:
``--tenant NAME`` (repeatable), ``--tenants PATTERN``, ``--all-tenants``. Everything is decided
here, before a tenant runs, so that bad input never leaves half a rollout behind.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from ..errors import TenantsInvalidError
from ..project.redaction import describe_error, escape_undecodable
from ..project.settings import Settings
from ..project.user_code import call_detached, import_user_module, own_failure
from ..project.wording import plural
from ..schema.tenants import SERVER_DATABASES, refused_database_name
from ..schema.validation import shown_name

#: Lists the server's database names (``listDatabases``, names only).
DatabaseNames = Callable[[], Awaitable[list[str]]]


@dataclass(frozen=True)
class Tenant:
    """One tenant database; ``uri``: the cluster a provider placed it on (None: the project's own)."""

    name: str
    uri: str | None = None


@dataclass(frozen=True)
class SelectionWords:
    """How a caller names the three ways of selecting, and the rollout's two bounds, in a refusal: the command line
    its flags, the Python API its ``Tenants`` parameters (each front end its own words; the checks and their
    sentences stay here and in :mod:`.rollout`)."""

    names: str
    pattern: str
    all: str
    parallel: str
    canary: str


#: The command line's words: its flags.
FLAG_WORDS = SelectionWords("--tenant", "--tenants", "--all-tenants", "--parallel", "--canary")
#: The Python API's words: the parameters of ``Tenants`` (the default).
PARAMETER_WORDS = SelectionWords(
    "Tenants(names=...)", "Tenants(pattern=...)", "Tenants(all=True)", "Tenants(parallel=...)", "Tenants(canary=...)"
)


@dataclass(frozen=True)
class TenantFlags:
    """What the caller asked for: ``names`` (``--tenant``), ``pattern`` (``--tenants``), ``all`` (``--all-tenants``);
    ``words``: how a refusal names them, as the caller does."""

    names: tuple[str, ...] = ()
    pattern: str | None = None
    all: bool = False
    words: SelectionWords = PARAMETER_WORDS

    def given(self) -> bool:
        """Whether any tenant flag was given (without one, a command acts on ``--db`` as always)."""
        return bool(self.names) or self.pattern is not None or self.all

    def check(self) -> TenantFlags:
        """One way of selecting at a time, each well formed."""
        said = self.words
        ways = [way for way, on in ((said.names, bool(self.names)), (said.pattern, self.pattern is not None), (said.all, self.all)) if on]
        if len(ways) > 1:
            raise TenantsInvalidError(f"{' and '.join(ways)} cannot be combined: select the tenants one way")
        if self.pattern is not None and not self.pattern:
            raise TenantsInvalidError(f"{said.pattern} needs a pattern (for example 'tenant_*')")
        for name in self.names:
            why = refused_database_name(name)
            if why is not None:
                raise TenantsInvalidError(f"{said.names} {_shown(name)}: {why}", tenant=_shown(name))
        twice = sorted({n for i, n in enumerate(self.names) if n in self.names[:i]})
        if twice:
            raise TenantsInvalidError(f"{said.names} given twice for {', '.join(twice)}", tenants=twice)
        return self


def _shown(name: object) -> str:
    """A name for a message: short text as is (bytes that were not UTF-8 as ``\\xff``), anything else by its type only."""
    if isinstance(name, str):
        return escape_undecodable(shown_name(name)) or "''"  # control characters escaped, never written raw; empty: seen as such
    return f"<{type(name).__name__}>"


async def select(settings: Settings, flags: TenantFlags, database_names: DatabaseNames) -> list[Tenant]:
    """The tenants ``flags`` select, in their stable order; :class:`TenantsInvalidError` when none or a bad one."""
    flags.check()
    if not flags.given():  # the API's Tenants() or Tenants(names=[]): it ran on every tenant (or failed an assert)
        raise TenantsInvalidError("no tenant selected: give names, a pattern or all=True")  # only the API's words: the CLI never gets here
    declared = settings.tenants
    if flags.all and declared is None:
        raise TenantsInvalidError(f"{flags.words.all} needs a [tenants] section (databases, match or provider) in the project file")
    configured = await configured_tenants(settings, database_names) if declared is not None else None
    if flags.names:
        if configured is None:
            return [Tenant(name) for name in sorted(flags.names)]
        known = {t.name for t in configured}
        unknown = [n for n in flags.names if n not in known]
        if unknown:
            raise TenantsInvalidError(
                f"not a tenant of the [tenants] selection: {', '.join(unknown)}", unknown=unknown
            )
        wanted = set(flags.names)
        return [t for t in configured if t.name in wanted]
    if flags.pattern is not None:
        pool = configured if configured is not None else [Tenant(n) for n in sorted(_tenant_databases(await database_names()))]
        chosen = [t for t in pool if fnmatchcase(t.name, flags.pattern)]
        if not chosen:
            where = "the [tenants] selection" if configured is not None else "the server's databases"
            raise TenantsInvalidError(f"{flags.words.pattern} {flags.pattern!r} matches none of {where}", pattern=flags.pattern)
        _usable([t.name for t in chosen], f"{flags.words.pattern} {flags.pattern!r}")
        return chosen
    assert configured is not None  # flags.all with a section
    return configured


def _tenant_databases(names: Iterable[str]) -> list[str]:
    """The server's databases a pattern may match: never admin, local or config (nor another case of them)."""
    return [n for n in names if n.lower() not in SERVER_DATABASES]


def _usable(names: list[str], where: str) -> list[str]:
    """``names`` a pattern matched, or a refusal of the first one the database-name rule refuses
    (a name with control characters, made on the server by other means), shown escaped."""
    for name in names:
        why = refused_database_name(name)
        if why is not None:
            raise TenantsInvalidError(f"{where} matches the database {_shown(name)}: {why}; narrow the pattern", tenant=_shown(name))
    return names


async def configured_tenants(settings: Settings, database_names: DatabaseNames) -> list[Tenant]:
    """The ``[tenants]`` section's selection (sorted, or the provider's order); never empty."""
    declared = settings.tenants
    assert declared is not None
    if declared.databases is not None:
        return [Tenant(n) for n in sorted(declared.databases)]
    if declared.match is not None:
        found = _usable(sorted(n for n in _tenant_databases(await database_names()) if fnmatchcase(n, declared.match)), f"[tenants] match {declared.match!r}")
        if not found:
            raise TenantsInvalidError(f"[tenants] match {declared.match!r} matches none of the server's databases", pattern=declared.match)
        return [Tenant(n) for n in found]
    assert declared.provider is not None
    return await provided_tenants(declared.provider, settings)


async def provided_tenants(spec: str, settings: Settings) -> list[Tenant]:
    """Import ``package.module:function``, call it with ``settings`` (sync in a thread, async on the loop), check what it returns."""
    where = f"[tenants] provider {spec}"
    module_name, _, attribute = spec.partition(":")
    try:
        module = import_user_module(module_name)
    except BaseException as exc:  # importing user code may raise anything, even SystemExit or KeyboardInterrupt
        if not own_failure(exc):
            raise
        raise TenantsInvalidError(f"{where} failed to import: {describe_error(exc)}", provider=spec) from None
    function = getattr(module, attribute, None)
    if function is None:
        raise TenantsInvalidError(f"{where}: {module_name} has no {attribute}", provider=spec)
    if not callable(function):
        raise TenantsInvalidError(f"{where}: {attribute} is not a function", provider=spec)
    try:
        returned = await call_detached(function, settings)  # a Ctrl-C meanwhile stops waiting for it
    except Exception as exc:
        raise TenantsInvalidError(f"{where} failed: {describe_error(exc)}", provider=spec) from None
    return checked_provided(returned, where)


def checked_provided(returned: Any, where: str) -> list[Tenant]:
    """A provider's answer as tenants: names, or ``(name, uri)`` pairs; every problem named by position, never by value."""
    if isinstance(returned, (str, bytes, dict)) or not isinstance(returned, Iterable):
        raise TenantsInvalidError(f"{where} returned {type(returned).__name__}: it must return a list of names or (name, uri) pairs")
    tenants: list[Tenant] = []
    problems: list[str] = []
    for index, item in enumerate(returned):
        name: object = item
        uri: object = None
        if isinstance(item, (tuple, list)):
            if len(item) != 2:
                problems.append(f"item {index}: a pair is (name, uri), not {plural(len(item), 'value')}")
                continue
            name, uri = item
            if not isinstance(uri, str) or not uri.startswith(("mongodb://", "mongodb+srv://")):
                problems.append(f"item {index}: its uri must be a mongodb:// or mongodb+srv:// string")
                continue
        why = refused_database_name(name)
        if why is not None:
            problems.append(f"item {index}: {why}")
            continue
        assert isinstance(name, str)
        tenants.append(Tenant(name, uri if isinstance(uri, str) else None))
    twice = sorted(n for n, count in Counter(t.name for t in tenants).items() if count > 1)
    if twice:
        problems.append(f"returned twice: {', '.join(twice)}")
    if problems:
        raise TenantsInvalidError(f"{where} returned bad tenants: {'; '.join(problems[:20])}", problems=problems[:100])
    if not tenants:
        raise TenantsInvalidError(f"{where} returned no tenants")
    return tenants
