"""A background migration's ``write_concern``: a number written as text, a wrong ``j`` or ``wtimeout``,
is refused when the file loads (exit 20, every problem named), never sent to the server."""

from __future__ import annotations

import json

import pytest

SOURCE = """
from mongoshift import Background

def migrate(doc, ctx):
    return doc

background = Background(collection="people", from_version=0, to_version=1, migrate=migrate, write_concern={concern})
"""


@pytest.mark.parametrize(
    ("concern", "words"),
    [
        ('{"w": "0"}', "w: '0' is a number written as text"),
        ('{"w": "2"}', "w: '2' is a number written as text"),
        ('{"w": " 1 "}', "w: ' 1 ' is a number written as text"),
        ('{"w": "1.5"}', "is a number written as text"),
        ('{"w": "  "}', "w must be a number of members"),
        ('{"w": 51}', "w: at most 50 members"),
        ('{"w": 1.0}', "w must be a number of members"),
        ('{"w": 1, "j": "true"}', "j must be True or False"),
        ('{"w": 1, "j": None}', "j must be True or False"),
        ('{"w": 1, "wtimeout": 1.5}', "wtimeout must be a whole number of ms"),
        ('{"w": 1, "wtimeout": True}', "wtimeout must be a whole number of ms"),
        ('{"w": 1, "wtimeout": 2**40}', "wtimeout must be a whole number of ms from 0 to 2147483647"),
    ],
)
def test_a_wrong_write_concern_is_refused_when_the_file_loads(project, cli, concern: str, words: str) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_bg.py", SOURCE.format(concern=concern))
    result = cli(project, "up", "--json")
    assert result.returncode == 20, result.stdout + result.stderr
    message = json.loads(result.stdout)["error"]["message"]
    assert "write_concern" in message and words in message, message


@pytest.mark.parametrize("concern", ['{"w": "majority"}', '{"w": "dc_east"}', '{"w": 3, "j": True, "wtimeout": 5000}', '{"w": 50, "wtimeout": 2147483647}'])
def test_a_good_write_concern_loads(project, cli, concern: str) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_bg.py", SOURCE.format(concern=concern))
    result = cli(project, "lint", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
