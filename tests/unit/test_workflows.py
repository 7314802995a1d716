"""The GitHub workflows and tools/real-mongo.sh stay in step with the repository.

The workflows run only on GitHub, and the script only where Docker is: nothing here runs them,
so these checks catch what would make them rot unseen: a ``run:`` line naming a script,
a subcommand or a test file that no longer exists, an action not pinned by its major tag, a
server started without the test commands that the suite's fail points need. actionlint
(in ``.ci/run``) checks the rest of the workflow syntax and expressions.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
SCRIPT = ROOT / "tools" / "real-mongo.sh"
#: A repository path as a run: line or the script writes one.
REPO_PATH = re.compile(r"^(?:\.ci|\.github|bench|docs|src|tests|tools)/[\w./-]*[\w-]$")


def _load(path: Path) -> dict[Any, Any]:
    loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict), path
    return loaded


def _steps() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path.name}:{job_name}", step)
        for path in WORKFLOWS
        for job_name, job in _load(path)["jobs"].items()
        for step in job["steps"]
    ]


def _commands(run: str) -> list[list[str]]:
    """The words of each command of a ``run:`` script (continuations joined, ``&&`` and ``;`` split)."""
    commands = []
    for line in run.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        current: list[str] = []
        for word in [*words, "&&"]:
            if word in ("&&", "||", ";", "|"):
                if current:
                    commands.append(current)
                current = []
            else:
                current.append(word)
    return commands


def _subcommands() -> set[str]:
    """The subcommands tools/real-mongo.sh accepts: the labels of its last ``case``."""
    text = SCRIPT.read_text(encoding="utf-8")
    dispatch = text[text.rindex('case "${1:-}" in') :]
    return {label for label in re.findall(r"^\s+([a-z][a-z-]*)\)", dispatch, re.MULTILINE)}


def test_there_are_workflows_and_each_parses_with_jobs_and_steps() -> None:
    assert {path.name for path in WORKFLOWS} >= {"real-mongodb.yml", "gates.yml"}
    for path in WORKFLOWS:
        workflow = _load(path)
        assert workflow["jobs"], path
        assert all(job["steps"] and job.get("timeout-minutes") for job in workflow["jobs"].values()), path


def test_every_action_is_pinned_by_its_major_tag() -> None:
    uses = [step["uses"] for _, step in _steps() if "uses" in step]
    assert uses
    assert [u for u in uses if not re.fullmatch(r"[\w.-]+/[\w./-]+@v\d+", u)] == []


def test_every_run_line_names_what_exists_in_the_repository() -> None:
    checked = 0
    for where, step in _steps():
        for words in _commands(step.get("run", "")):
            if words[0] == "bash":
                words = words[1:]
            program = words[0]
            if REPO_PATH.match(program) or program.startswith("./"):
                assert (ROOT / program).is_file(), f"{where}: {program} is not in the repository"
                checked += 1
            if program == "tools/real-mongo.sh":
                assert words[1] in _subcommands(), f"{where}: tools/real-mongo.sh has no subcommand {words[1]!r}"
            if program == ".ci/run" and len(words) > 1:
                assert f'"${{1:-}}" = {words[1]}' in (ROOT / ".ci" / "run").read_text(encoding="utf-8"), where
            for word in words[1:]:
                if REPO_PATH.match(word):
                    assert (ROOT / word).exists(), f"{where}: {word} is not in the repository"
    assert checked >= 3


def test_the_matrix_versions_are_ones_the_script_accepts() -> None:
    versions = [
        version
        for path in WORKFLOWS
        for job in _load(path)["jobs"].values()
        for version in job.get("strategy", {}).get("matrix", {}).get("mongodb", [])
    ]
    assert {"6.0", "7.0", "8.0"} <= set(versions)
    assert all(re.fullmatch(r"\d+\.\d+", v) for v in versions)


def test_the_script_names_files_that_exist_and_starts_every_server_with_test_commands() -> None:
    text = SCRIPT.read_text(encoding="utf-8")
    named = {word for line in text.splitlines() if not line.lstrip().startswith("#") for word in re.findall(r"[\w./-]+", line) if REPO_PATH.match(word)}
    assert "bench/background.py" in named and "tests/background/test_sharded_cluster.py" in named
    assert [path for path in named if not (ROOT / path).exists()] == []
    servers = [line for line in text.replace("\\\n", " ").splitlines() if re.search(r"\bmongo[ds] --", line)]
    assert len(servers) == 4  # the replica set's mongod, the config server's, the shards' (one line, two runs), the mongos
    assert all('"${TEST_PARAMS[@]}"' in line for line in servers), servers
    assert "TEST_PARAMS=(--setParameter enableTestCommands=1)" in text


@pytest.mark.parametrize("doc", ["docs/testing.md", "README.md"])
def test_the_documented_script_commands_exist(doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    used = set(re.findall(r"tools/real-mongo\.sh ([a-z][a-z-]*)", text))
    assert used <= _subcommands()
    if doc == "docs/testing.md":
        assert {"test", "sharded", "bench", "up", "down"} <= used
