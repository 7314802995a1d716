"""Shared fixtures: one embedded server per pytest process, a fresh database per test.

With ``MONGOSHIFT_TEST_URI`` set, the same tests run against that server instead
(a real replica set); tests that need what the embedded server lacks are marked
``real_mongodb`` and skipped without it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, settings
from pymongo import AsyncMongoClient, MongoClient

from mongoshift.embedded.process import embedded_server

from .node_tools import node_packages  # noqa: F401  (a session fixture: npm packages installed once)

# Some machines (container images, CI runners) set PYTHONDONTWRITEBYTECODE. Then nothing is cached:
# each of the four workers compiles and assertion-rewrites every test module again (about 5 s of CPU
# each), as does every pytest the suite starts itself. The suite writes its caches (``__pycache__``,
# ignored by git) and so do the processes it starts, which inherit the environment from here; this
# module is imported before the workers start and before any test module is collected.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# The embedded server runs one command at a time, so a request can wait behind long ones: the
# socket timeout is generous. Heartbeats keep the driver's default frequency: they are answered
# while a command runs (fix (al) of docs/embedded.md), and a server marked Unknown after a
# "not primary" error (an injected ShutdownInProgress) is seen again at the next heartbeat,
# within server selection's 30 s, as with mongod.
TEST_CLIENT_OPTIONS: dict[str, int] = {
    "connectTimeoutMS": 120_000,
    "socketTimeoutMS": 300_000,
    "serverSelectionTimeoutMS": 30_000,
}

REAL_URI = os.environ.get("MONGOSHIFT_TEST_URI")

#: The ``appName`` of every client of this pytest process on a real server (the test's own, and
#: mongoshift's, which keeps the URI's): pytest-xdist's workers share that one server, and a fail
#: point is server-wide, so each worker's fail points name its own clients (``fail_point_data``).
#: An embedded server serves one worker only.
APP_NAME = f"mongoshift-tests-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"


def with_app_name(uri: str, name: str | None) -> str:
    """``uri`` with its ``appName`` option set to ``name`` (replacing one it had), or without one
    for ``None``; the other options are kept as written."""
    base, _, query = uri.partition("?")
    options = [part for part in query.split("&") if part and part.split("=", 1)[0].lower() != "appname"]
    if name is not None:
        options.append(f"appName={name}")
    if not options:
        return base
    if "/" not in base.partition("://")[2]:
        base += "/"  # a URI needs the slash before its options
    return f"{base}?{'&'.join(options)}"


def fail_point_data(**data: Any) -> dict[str, Any]:
    """The ``data`` of a ``failCommand`` fail point: on a real server, limited to this process's clients."""
    if REAL_URI:
        data.setdefault("appName", APP_NAME)
    return data

# Property tests must not depend on the machine's load: no per-example deadline, no health
# check that times data generation, and the same examples on every run (a failure reproduces
# as it was seen). ``HYPOTHESIS_PROFILE=explore`` draws fresh examples, with the same timing rules.
settings.register_profile(
    "mongoshift",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
    print_blob=True,
)
settings.register_profile("explore", settings.get_profile("mongoshift"), derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "mongoshift"))


def examples(thorough: int, quick: int) -> Any:
    """A ``parametrize`` of a property test's example count: ``quick`` in the default run, ``thorough``
    under ``slow`` (``.ci/run``'s second step), so the full search still runs in CI while the README's
    command stays fast. Derandomized, the quick run's examples are the same on every run."""
    return pytest.mark.parametrize(
        "max_examples", [pytest.param(quick, id=f"{quick}-examples"), pytest.param(thorough, id=f"{thorough}-examples", marks=pytest.mark.slow)]
    )


@asynccontextmanager
async def fail_command(client: AsyncMongoClient, mode: Any, **data: Any) -> AsyncIterator[None]:
    """The server's ``failCommand`` fail point, switched off again on exit (also on a real
    mongod started with ``--setParameter enableTestCommands=1``)."""
    await client.admin.command({"configureFailPoint": "failCommand", "mode": mode, "data": fail_point_data(**data)})
    try:
        yield
    finally:
        await client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})


async def until(what: str, check: Callable[[], Any], bound: float = 60.0) -> Any:
    """Poll ``check`` (a function, or one that returns an awaitable) until it gives something true, and return that.

    For a state or event that has no notification of its own: ``bound`` only ends a hang (a loaded
    machine may take long to get there), it is not a budget the test measures."""
    deadline = asyncio.get_running_loop().time() + bound
    while True:
        value = check()
        if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
            value = await value
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not reached within {bound:g}s: {what}")
        await asyncio.sleep(0.05)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if REAL_URI:
        return
    skip = pytest.mark.skip(reason="needs a real MongoDB replica set: set MONGOSHIFT_TEST_URI")
    for item in items:
        if "real_mongodb" in item.keywords:
            item.add_marker(skip)


#: Added to the suite's server URI, so that mongoshift's own clients take it too: after a state
#: change error (an injected ShutdownInProgress), the driver marks the server Unknown and waits
#: for its monitor's next check; at the driver's default (10 s) each such test waits 10 s.
HEARTBEAT_OPTION = "heartbeatFrequencyMS=500"


def with_heartbeat(uri: str) -> str:
    """``uri`` with :data:`HEARTBEAT_OPTION`, unless it names a heartbeat of its own."""
    if "heartbeatfrequencyms" in uri.lower():
        return uri
    base, _, query = uri.partition("?")
    if "/" not in base.partition("://")[2]:
        base += "/"
    return f"{base}?{query + '&' if query else ''}{HEARTBEAT_OPTION}"


@pytest.fixture(scope="session")
def mongo_uri() -> Iterator[str]:
    if REAL_URI:
        yield with_heartbeat(with_app_name(REAL_URI, APP_NAME))
        return
    with embedded_server() as uri:
        yield with_heartbeat(uri)


@pytest.fixture(scope="session")
def standalone_uri() -> Iterator[str]:
    """A standalone server, for what mongoshift does where there are no transactions and no
    change streams: ``MONGOSHIFT_TEST_STANDALONE_URI`` (a standalone mongod), else the embedded
    server started with ``--standalone`` (also when MONGOSHIFT_TEST_URI names a replica set)."""
    real = os.environ.get("MONGOSHIFT_TEST_STANDALONE_URI")
    if real:
        yield real
        return
    with embedded_server(standalone=True) as uri:
        yield uri


@pytest.fixture
def db_name() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def client(mongo_uri: str) -> AsyncIterator[AsyncMongoClient]:
    c: AsyncMongoClient = AsyncMongoClient(mongo_uri, **TEST_CLIENT_OPTIONS)
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
async def db(client: AsyncMongoClient, db_name: str):  # type: ignore[no-untyped-def]
    database = client[db_name]
    yield database
    await client.drop_database(db_name)


@pytest.fixture
def sync_client(mongo_uri: str) -> Iterator[MongoClient]:
    c: MongoClient = MongoClient(mongo_uri, **TEST_CLIENT_OPTIONS)
    try:
        yield c
    finally:
        c.close()


class Project:
    """A throwaway mongoshift project pointing at the test database."""

    def __init__(self, root: os.PathLike[str] | str, uri: str, db: str) -> None:
        from pathlib import Path

        self.root = Path(root)
        self.uri = uri
        self.db = db
        self.migrations = self.root / "migrations"
        self.migrations.mkdir(parents=True, exist_ok=True)
        self.config = self.root / "mongoshift.toml"
        self.write_config()

    def write_config(self, **extra: object) -> None:
        import json

        lines = ["[mongoshift]", f"uri = {json.dumps(self.uri)}", f"db = {json.dumps(self.db)}", 'migrations_dir = "migrations"']
        for key, value in extra.items():
            lines.append(f"{key} = {json.dumps(value)}")
        self.config.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def add(self, name: str, source: str) -> os.PathLike[str]:
        import textwrap

        path = self.migrations / name
        path.write_text(textwrap.dedent(source), encoding="utf-8")
        return path

    def settings(self, **flags: object):  # type: ignore[no-untyped-def]
        from mongoshift.project.settings import load_settings

        return load_settings(flags, config_path=self.config, environ={})


@pytest.fixture
def project(tmp_path, mongo_uri: str, db_name: str, sync_client: MongoClient) -> Iterator[Project]:  # type: ignore[no-untyped-def]
    yield Project(tmp_path, mongo_uri, db_name)
    sync_client.drop_database(db_name)


@pytest.fixture
async def standalone_db(standalone_uri: str, db_name: str):  # type: ignore[no-untyped-def]
    """A fresh database on the standalone server (``standalone_uri``)."""
    c: AsyncMongoClient = AsyncMongoClient(standalone_uri, **TEST_CLIENT_OPTIONS)
    try:
        yield c[db_name]
        await c.drop_database(db_name)
    finally:
        await c.close()


@pytest.fixture
def standalone_project(tmp_path, standalone_uri: str, db_name: str, standalone_db) -> Project:  # type: ignore[no-untyped-def]
    """A throwaway project on the standalone server, its database being ``standalone_db``."""
    return Project(tmp_path, standalone_uri, db_name)


# ---------------------------------------------------------------- the command line

class CliResult(NamedTuple):
    """What one ``mongoshift`` command left: its exit code, stdout and stderr (named as
    :class:`subprocess.CompletedProcess` names them, so both kinds of call read the same)."""

    returncode: int
    stdout: str
    stderr: str


def cli_env() -> dict[str, str]:
    """The environment of a CLI child process: the test's own, without ``MONGOSHIFT_*``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MONGOSHIFT_")}
    clean["NO_COLOR"] = "1"
    return clean


def cli_process(project: Project, *args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``mongoshift ARGS`` as a real process, for a test that needs one (its environment,
    file descriptors, start-up time); every other test uses the in-process ``cli`` fixture."""
    return subprocess.run(
        [sys.executable, "-m", "mongoshift", *args], cwd=project.root, env=env or cli_env(), capture_output=True, text=True, timeout=timeout
    )


def start_cli(project: Project, *args: str) -> subprocess.Popen[str]:
    """``mongoshift ARGS`` started as a process and left running (signals, kill -9, several processes)."""
    return subprocess.Popen(
        [sys.executable, "-m", "mongoshift", *args], cwd=project.root, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@contextmanager
def reaped(process: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """``process``, killed and waited for on the way out if the test left it running (a failed assertion, a hang)."""
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def interrupt_at(process: subprocess.Popen[str], marker: Path, go: Path) -> str:
    """SIGINT once ``process`` reached the point where it writes ``marker`` (a file its code under test creates, then
    waits for ``go``), then let it go on; returns its stderr. Waits on the marker, not on time (with a hang guard)."""
    with reaped(process):
        for _ in range(2400):
            if marker.exists() or process.poll() is not None:
                break
            time.sleep(0.05)
        assert marker.exists(), process.communicate()
        process.send_signal(signal.SIGINT)
        go.write_text("")
        _, stderr = process.communicate(timeout=120)
    return stderr


Cli = Callable[..., CliResult]


def drop_new_stream_handlers(logger: logging.Logger, before: list[logging.Handler]) -> None:
    """Take off ``logger`` the plain stream handlers added since ``before`` (pytest's own capture handlers,
    a subclass, are pytest's to add and remove)."""
    for handler in [h for h in logger.handlers if h not in before and type(h) is logging.StreamHandler]:
        logger.removeHandler(handler)


@pytest.fixture(autouse=True)
def _loggers_as_found() -> Iterator[None]:
    """Every test leaves the ``mongoshift`` and root loggers as it found them. ``Output()`` (and so the CLI run in
    this process, the demo, ``main([...])``) puts handlers on this test's captured stderr, which pytest closes after
    the test: left there, a later test's warning failed with "Logging error" (an order-dependent failure)."""
    loggers = [logging.getLogger("mongoshift"), logging.getLogger()]
    saved = [(list(logger.handlers), logger.propagate, logger.level) for logger in loggers]
    yield
    for logger, (handlers, propagate, level) in zip(loggers, saved, strict=True):
        drop_new_stream_handlers(logger, handlers)
        logger.propagate, logger.level = propagate, level
    logging.captureWarnings(False)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Cli]:
    """``cli(where, *args)``: ``mongoshift ARGS`` run in this process from ``where`` (a
    :class:`Project` or a folder), as ``python -m mongoshift`` runs it there, without ``MONGOSHIFT_*``
    variables; a :class:`CliResult`.

    A command costs about a tenth of a child process's start. Each call leaves the process as
    it found it: the current folder, the environment (the CLI exports a project's ``.env``),
    ``sys.path`` and the project's modules it imported, the ``mongoshift`` logger the CLI points
    at its stderr, and stdout (``--json`` swaps it until ``main`` returns). From an async test the command runs in a thread, since it runs its own
    event loop; the test's loop waits meanwhile.
    """
    from mongoshift.cli.main import main  # loaded by the first test that runs a command

    monkeypatch.setenv("NO_COLOR", "1")
    for key in [k for k in os.environ if k.startswith("MONGOSHIFT_")]:
        monkeypatch.delenv(key)
    logger = logging.getLogger("mongoshift")
    saved_logger = (list(logger.handlers), logger.propagate, logger.level)
    # --log-format json also puts a handler on the root logger (other libraries' lines as JSON) on this test's
    # captured stderr: left there, a later test's warning from any logger wrote to a closed capture ("Logging error")
    root_logger = logging.getLogger()

    def run(args: list[str]) -> int:
        try:
            main(args)
        except SystemExit as ended:
            return int(ended.code) if isinstance(ended.code, int) else (0 if ended.code is None else 1)
        return 0

    def call(where: Project | Path, *args: str) -> CliResult:
        root = where.root if isinstance(where, Project) else Path(where)
        environ, path, modules = dict(os.environ), list(sys.path), set(sys.modules)
        root_handlers = list(root_logger.handlers)
        folder = os.getcwd()
        capsys.readouterr()
        os.chdir(root)
        sys.path.insert(0, str(root))  # as `python -m mongoshift` starts: the project's modules import (uri_factory)
        try:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                code = run(list(args))
            else:
                ended: list[int | BaseException] = []

                def in_thread() -> None:
                    try:
                        ended.append(run(list(args)))
                    except BaseException as exc:  # raised again in the test's own thread
                        ended.append(exc)

                worker = threading.Thread(target=in_thread, name="mongoshift-cli")
                worker.start()
                worker.join()
                if isinstance(ended[0], BaseException):
                    raise ended[0]
                code = ended[0]
        finally:
            os.chdir(folder)
            os.environ.clear()
            os.environ.update(environ)
            sys.path[:] = path
            for name in set(sys.modules) - modules:  # the project's own modules (hooks, uri_factory): the next test has its own
                if str(getattr(sys.modules[name], "__file__", None) or "").startswith(str(root)):
                    del sys.modules[name]
            logger.handlers[:] = saved_logger[0]
            logger.propagate, logger.level = saved_logger[1], saved_logger[2]
            drop_new_stream_handlers(root_logger, root_handlers)
            logging.captureWarnings(False)
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    yield call
