"""Other languages' official clients against the server: Node's driver (and mongosh, when at hand).

pymongo is lenient where the Node, Go and Java drivers are not (a cursor id must be an
int64: docs/embedded.md, fix r), so the embedded server is also checked with a client
nobody here wrote. Runs unchanged against MONGOSHIFT_TEST_URI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ..node_tools import NodePackages, npm_install

SCRIPT = Path(__file__).with_name("driver_check.cjs")


def test_node_driver_find_aggregate_writes_indexes_collections_and_a_transaction(
    node_packages: NodePackages, mongo_uri: str, db_name: str
) -> None:
    result = subprocess.run(
        ["node", str(SCRIPT), mongo_uri, db_name], env=node_packages.env(), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen == {
        "insert": 25,
        "findGetMore": 25,  # batches of 4: six getMore round trips on a 64-bit cursor id
        "aggregate": ["even:13", "odd:12"],
        "update": 12,
        "delete": 5,
        "indexes": ["_id_", "tag_i"],
        "listCollections": ["items", "other"],
        "transaction": 2,
        "aborted": 0,
    }


@pytest.fixture(scope="session")
def mongosh(tmp_path_factory: pytest.TempPathFactory) -> str:
    """mongosh from PATH; from npm only when asked (its install takes a minute or more)."""
    found = shutil.which("mongosh")
    if found:
        return found
    if os.environ.get("MONGOSHIFT_TEST_MONGOSH") != "1":
        pytest.skip("mongosh is not on PATH; set MONGOSHIFT_TEST_MONGOSH=1 to install it from npm for this test (~1-2 min)")
    folder = tmp_path_factory.mktemp("mongosh")
    npm_install(folder, "mongosh", timeout=600)
    return str(folder / "node_modules" / ".bin" / "mongosh")


def test_mongosh_eval(mongosh: str, mongo_uri: str, db_name: str) -> None:
    script = (
        f"const d = db.getSiblingDB({json.dumps(db_name)});"
        "d.a.insertMany([{x: 1}, {x: 2}, {x: 3}]); d.a.createIndex({x: 1});"
        "print(JSON.stringify({n: d.a.countDocuments(), read: d.a.find().batchSize(1).toArray().length,"
        " names: d.getCollectionNames(), indexes: d.a.getIndexes().length})); d.dropDatabase();"
    )
    result = subprocess.run(
        [mongosh, mongo_uri, "--quiet", "--norc", "--eval", script], capture_output=True, text=True, timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("{"))
    assert json.loads(line) == {"n": 3, "read": 3, "names": ["a"], "indexes": 2}
