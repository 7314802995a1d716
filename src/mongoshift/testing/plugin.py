"""The pytest plugin (``pytest11`` entry point ``mongoshift``): fixtures to test your migrations.

Loaded by every pytest run in an environment where mongoshift is installed, so this module
imports nothing but pytest and the standard library: the server starts, and the driver and
the engine load, only when a test asks for a ``mongoshift_*`` fixture. Every fixture name
starts with ``mongoshift_`` so that it cannot shadow a fixture of the project under test.
"""

from __future__ import annotations

import importlib.util
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pymongo.database import Database

    from mongoshift.testing.harness import MigrationHarness

#: A MongoDB the fixtures use instead of starting the embedded server (a real replica set in CI).
URI_VARIABLE = "MONGOSHIFT_TEST_URI"
CONFIG_OPTION = "mongoshift_config"


class _ShownMasked(str):
    """The test server's URI, itself for every use but shown without its secrets: pytest prints a
    fixture's value (and every argument it is passed as) in a failure's traceback."""

    __slots__ = ()

    def __repr__(self) -> str:
        from mongoshift.api import redact  # the plugin's one door (contract testing-door); loaded only when shown

        return repr(redact(str(self), None))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        CONFIG_OPTION,
        "mongoshift project file (mongoshift.toml or pyproject.toml) the mongoshift_* fixtures test, "
        "relative to the rootdir; default: the one in the rootdir",
        default="",
    )


@pytest.fixture(scope="session")
def mongoshift_uri() -> Iterator[str]:
    """``MONGOSHIFT_TEST_URI`` when set, else one embedded server for the whole session."""
    uri = os.environ.get(URI_VARIABLE)
    if uri:
        yield _ShownMasked(uri)
        return
    if importlib.util.find_spec("mongoeco") is None:
        pytest.fail(
            f"the mongoshift_* fixtures need a server: set {URI_VARIABLE} to a MongoDB, "
            'or install the embedded one with pip install "mongoshift[embedded]"',
            pytrace=False,
        )
    from mongoshift.embedded.process import embedded_server

    with embedded_server() as started:
        yield _ShownMasked(started)


@pytest.fixture(scope="session")
def mongoshift_config(pytestconfig: pytest.Config) -> Path | None:
    """The project file under test: the ``mongoshift_config`` ini option, else found in the rootdir (None).

    Override this fixture to test another project (a folder of sample migrations, say).
    """
    configured = str(pytestconfig.getini(CONFIG_OPTION) or "")
    return Path(pytestconfig.rootpath, configured) if configured else None


@pytest.fixture
def mongoshift_db_name() -> str:
    """A database name no other test uses."""
    return f"mongoshift_test_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def mongoshift_project(
    pytestconfig: pytest.Config, mongoshift_uri: str, mongoshift_db_name: str, mongoshift_config: Path | None
) -> Iterator[MigrationHarness]:
    """The project's migrations against a fresh database, dropped after the test."""
    from pymongo import MongoClient

    from mongoshift import api
    from mongoshift.testing.harness import CLIENT_OPTIONS, MigrationHarness

    if mongoshift_config is not None and not mongoshift_config.is_file():
        pytest.fail(f"{CONFIG_OPTION}: {mongoshift_config} is not a file", pytrace=False)
    # Only the project file counts: a developer's MONGOSHIFT_URI (production?), in the environment or
    # in the project's .env, must never leak in.
    settings = api.load_settings(
        {"uri": mongoshift_uri, "db": mongoshift_db_name},
        config_path=mongoshift_config,
        environ={},
        cwd=pytestconfig.rootpath,
        env_file=False,
    )
    if not Path(settings.migrations_dir).is_dir():
        pytest.fail(
            f"the migrations folder {settings.migrations_dir} does not exist: "
            f"set {CONFIG_OPTION} in the pytest configuration to the project file to test",
            pytrace=False,
        )
    client: MongoClient[dict[str, Any]] = MongoClient(mongoshift_uri, **CLIENT_OPTIONS)
    try:
        yield MigrationHarness(settings, client)
    finally:
        try:
            client.drop_database(mongoshift_db_name)
        finally:
            client.close()


@pytest.fixture
def mongoshift_db(mongoshift_project: MigrationHarness) -> Database[dict[str, Any]]:
    """The test's fresh database (pymongo's sync API); the same one ``mongoshift_project`` migrates."""
    return mongoshift_project.db
