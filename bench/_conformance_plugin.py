"""pytest plugin that ``bench/conformance.py`` loads into PyMongo's own test run (``-p _conformance_plugin``).

It is the harness plumbing, and nothing else: it never changes what a test sends or checks.

* **Which server**: ``MONGOSHIFT_CONFORMANCE_SERVERS`` lists ``host:port`` entries, one per
  pytest-xdist worker (one entry without xdist); the worker's entry becomes PyMongo's
  ``DB_IP``/``DB_PORT`` before PyMongo's ``test`` package reads them.
* **Server facts the harness reads before any test**: PyMongo's ``ClientContext`` asks for
  ``buildinfo`` (lower case, through ``server_info()``) and ``getParameter: "*"``. When the server
  refuses one of them with 59 (CommandNotFound), the refused command is answered here instead:
  ``buildinfo`` by the server's ``buildInfo``, ``getParameter`` by ``{enableTestCommands: <does
  configureFailPoint work>}``. On a server that answers both, nothing changes. Each fallback used is
  reported (``fallbacks``), because it says the server lacks that command.
* **Which tests**: only the tests generated from the unified-format JSON files of the areas
  ``bench/conformance.py`` lists (the classes PyMongo's ``generate_test_classes`` builds); every
  other test of those modules (prose tests, legacy formats) is deselected. A generated class whose
  name an earlier directory of the same module took is renamed instead of lost
  (``_keep_colliding_classes``).
* **Results**: one record per test, with the facts a skip is judged by (the file's and the test's
  ``runOnRequirements``, the spec's ``skipReason``, the skip PyMongo's runner itself would make on
  any server), written as JSON to ``MONGOSHIFT_CONFORMANCE_OUT`` at the end of the session.
"""

from __future__ import annotations

import json
import os
import re
import unittest
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

SERVERS_VARIABLE = "MONGOSHIFT_CONFORMANCE_SERVERS"
OUT_VARIABLE = "MONGOSHIFT_CONFORMANCE_OUT"
AREAS_VARIABLE = "MONGOSHIFT_CONFORMANCE_AREAS"
_KEY = "conformance"
COMMAND_NOT_FOUND = 59

_fallbacks: set[str] = set()
_records: dict[str, dict[str, Any]] = {}
_profile: dict[str, Any] = {}


def _point_pymongo_tests_at_the_server() -> None:
    """Set ``DB_IP``/``DB_PORT`` when pytest loads this plugin: before PyMongo's conftest imports its
    ``test`` package, which reads them once."""
    servers = [s for s in os.environ.get(SERVERS_VARIABLE, "").split(",") if s]
    if not servers:
        raise pytest.UsageError(f"{SERVERS_VARIABLE} is not set: run this through bench/conformance.py")
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    host, _, port = servers[worker % len(servers)].rpartition(":")
    os.environ["DB_IP"] = host
    os.environ["DB_PORT"] = port


_point_pymongo_tests_at_the_server()


def pytest_configure(config: pytest.Config) -> None:
    import test as pymongo_test

    # PyMongo's test package, not the standard library's ``test``.
    if not Path(pymongo_test.__file__ or "").is_relative_to(config.rootpath):
        raise pytest.UsageError(f"the test package imported is not PyMongo's: {pymongo_test.__file__}")
    _install_server_fact_fallbacks()
    _keep_colliding_classes()


def _keep_colliding_classes() -> None:
    """Keep every generated class of a module, renaming one whose name another directory already took.

    ``generate_test_classes`` names a class ``Test<directory><file>``, and ``test_transactions_unified``
    generates both ``transactions/unified`` and ``transactions-convenient-api/unified``: their
    ``commit.json`` and ``transaction-options.json`` become the same two names, and the second
    directory's classes replace the first's in the module, so PyMongo's own run never runs those 20
    transactions tests. Here the later class gets its area in front of its name instead."""
    import test.unified_format as unified_format

    generate = unified_format.generate_test_classes
    taken: dict[str, set[str]] = {}

    def generate_keeping_all(test_path: str, module: str = "test.unified_format", *args: Any, **kwargs: Any) -> dict[str, Any]:
        classes: dict[str, Any] = generate(test_path, module, *args, **kwargs)
        names = taken.setdefault(module, set())
        kept: dict[str, Any] = {}
        for name, cls in classes.items():
            if name in names:
                area = "".join(word.capitalize() for word in re.split(r"[-_]", _area(cls) or "other"))
                name = cls.__name__ = cls.__qualname__ = f"Test{area}{name.removeprefix('Test')}"
            names.add(name)
            kept[name] = cls
        return kept

    unified_format.generate_test_classes = generate_keeping_all


@contextmanager
def _patched(owner: Any, name: str, replacement: Callable[..., Any]) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, original)


def _install_server_fact_fallbacks() -> None:
    import test as pymongo_test
    from pymongo.errors import OperationFailure
    from pymongo.synchronous.database import Database

    context_class = pymongo_test.ClientContext
    init_client = context_class._init_client
    command = Database.command

    def fallback_command(self: Database[Any], cmd: Any, *args: Any, **kwargs: Any) -> Any:
        name = cmd if isinstance(cmd, str) else next(iter(cmd), "")
        try:
            return command(self, cmd, *args, **kwargs)
        except OperationFailure as exc:
            if exc.code != COMMAND_NOT_FOUND or name not in ("buildinfo", "getParameter"):
                raise
            _fallbacks.add(name)
            if name == "buildinfo":
                return command(self, "buildInfo")
            return {"enableTestCommands": _test_commands_work(self, command)}

    def init_with_fallbacks(context: Any) -> None:
        with _patched(Database, "command", fallback_command):
            init_client(context)

    context_class._init_client = init_with_fallbacks


def _test_commands_work(admin: Any, command: Callable[..., Any]) -> bool:
    """Whether ``configureFailPoint`` is served: what ``enableTestCommands`` tells a driver's tests."""
    from pymongo.errors import OperationFailure

    try:
        command(admin, {"configureFailPoint": "failCommand", "mode": "off"})
    except OperationFailure:
        return False
    return True


def _area(cls: type) -> str | None:
    test_path = getattr(cls, "TEST_PATH", None)
    if not test_path or not hasattr(cls, "TEST_SPEC"):
        return None
    parts = Path(test_path).parts
    return parts[parts.index("test") + 1] if "test" in parts else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    areas = set(os.environ.get(AREAS_VARIABLE, "").split(","))
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        cls = getattr(item, "cls", None)
        area = _area(cls) if cls is not None else None
        (keep if area in areas else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


def _spec_of(cls: Any, method: str) -> dict[str, Any]:
    for spec in cls.TEST_SPEC["tests"]:
        if "test_{}".format(spec["description"].strip(". ").replace(" ", "_").replace(".", "_")) == method:
            return dict(spec)
    raise LookupError(f"no spec test named {method} in {cls.__name__}")


def _runner_skip(cls: Any, method: str, spec: dict[str, Any]) -> str | None:
    """The skip PyMongo's runner makes whatever the server (test commands enabled, as drivers test)."""
    from test import client_context

    instance = cls(method)
    enabled = client_context.test_commands_enabled
    client_context.test_commands_enabled = True
    try:
        instance.maybe_skip_test(spec)
    except unittest.SkipTest as exc:
        return str(exc)
    finally:
        client_context.test_commands_enabled = enabled
    return None


def _server_profile() -> dict[str, Any]:
    from pymongo.encryption_options import _HAVE_PYMONGOCRYPT
    from test import client_context

    if client_context.load_balancer:
        topology = "load-balanced"
    elif client_context.is_mongos:
        topology = "sharded"
    elif client_context.is_rs:
        topology = "replicaset"
    else:
        topology = "single"
    return {
        "version": ".".join(str(part) for part in tuple(client_context.version)[:3]),
        "topology": topology,
        "auth": bool(client_context.auth_enabled),
        "test_commands": bool(client_context.test_commands_enabled),
        "csfle": bool(_HAVE_PYMONGOCRYPT),
        "fallbacks": sorted(_fallbacks),
    }


def _requirement_parameters(requirements: list[dict[str, Any]]) -> dict[str, Any]:
    from test import client_context

    names = {name for requirement in requirements for name in requirement.get("serverParameters", {})}
    return {name: client_context.server_parameters.get(name) for name in sorted(names)}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    cls: Any = getattr(item, "cls", None)
    if cls is None:
        return report
    facts: dict[str, Any] = {"area": _area(cls), "file": cls.__name__, "test": item.name}
    if report.when == "call":
        facts["profile"] = _server_profile()
        if report.skipped and not hasattr(report, "wasxfail"):
            spec = _spec_of(cls, item.name)
            file_requirements = list(cls.TEST_SPEC.get("runOnRequirements", []))
            test_requirements = list(spec.get("runOnRequirements", []))
            facts |= {
                "file_requirements": file_requirements,
                "test_requirements": test_requirements,
                "spec_skip_reason": spec.get("skipReason"),
                "runner_skip": _runner_skip(cls, item.name, spec),
                "server_parameters": _requirement_parameters(file_requirements + test_requirements),
            }
    report.user_properties.append((_KEY, json.dumps(facts, default=str)))
    return report


def _message(report: pytest.TestReport) -> str:
    longrepr: Any = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (path, line, "Skipped: reason")
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)
    return str(longrepr or "")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Every phase of every test, on the process that writes the results (xdist's controller)."""
    record = _records.setdefault(report.nodeid, {"nodeid": report.nodeid, "outcome": "passed", "message": "", "seconds": 0.0})
    record["seconds"] = round(record["seconds"] + report.duration, 3)
    for key, value in report.user_properties:
        if key == _KEY:
            facts = json.loads(str(value))
            _profile.update(facts.pop("profile", {}))
            record.update(facts)
    if hasattr(report, "wasxfail"):
        record["outcome"] = "xfailed" if report.skipped else "failed"
        record["message"] = record["message"] or f"expected to fail, passed: {report.wasxfail}"
    elif report.skipped:
        record["outcome"] = "skipped"
        record["message"] = _message(report)
    elif report.failed and record["outcome"] != "failed":
        record["outcome"] = "failed"
        record["message"] = f"{'' if report.when == 'call' else report.when + ': '}{_message(report)}"


def pytest_sessionfinish(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):
        return
    out = os.environ.get(OUT_VARIABLE)
    if not out:
        return
    Path(out).write_text(json.dumps({"profile": _profile, "records": list(_records.values())}, indent=1))
