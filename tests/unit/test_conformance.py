"""bench/conformance.py: how a result of PyMongo's spec tests is counted, how a skip is judged
(would a MongoDB 7.0 single-node replica set skip it too?) and what ``--check`` refuses.

No network and no source distribution: the records are shaped as its pytest plugin writes them.
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest

from ..scripts import ROOT, load_script

STANDALONE = {"version": "7.0.0", "topology": "single", "auth": False, "test_commands": True, "csfle": False, "fallbacks": []}
REPLICA_SET = STANDALONE | {"topology": "replicaset"}


@pytest.fixture(scope="module")
def conformance() -> ModuleType:
    return load_script("bench/conformance.py")


def skipped(message: str, *, file: list[dict[str, Any]] | None = None, test: list[dict[str, Any]] | None = None, **facts: Any) -> dict[str, Any]:
    return {
        "nodeid": "test/test_x.py::TestUnifiedX::test_y", "area": "crud", "file": "TestUnifiedX", "test": "test_y",
        "outcome": "skipped", "message": message, "file_requirements": file or [], "test_requirements": test or [],
        "spec_skip_reason": None, "runner_skip": None, "server_parameters": {},
    } | facts


def judge(conformance: ModuleType, record: dict[str, Any], profile: dict[str, Any] = STANDALONE) -> tuple[str, str]:
    skip = conformance.classify_skip(record, conformance.ServerProfile.from_record(profile))
    return skip.category, skip.label


def test_a_replica_set_test_skipped_on_a_standalone_is_skipped_only_here(conformance: ModuleType) -> None:
    record = skipped("runOnRequirements not satisfied", test=[{"topologies": ["sharded", "replicaset"]}])
    assert judge(conformance, record) == (conformance.EMBEDDED, "runOnRequirements: needs topology replicaset|sharded")


def test_version_auth_csfle_and_sharding_requirements_skip_on_70_too(conformance: ModuleType) -> None:
    for requirement, label in [
        ({"minServerVersion": "8.0"}, "server >= 8.0"),
        ({"maxServerVersion": "4.2.99"}, "server <= 4.2.99"),
        ({"topologies": ["sharded"]}, "topology sharded"),
        ({"auth": True, "topologies": ["replicaset"]}, "auth"),
        ({"csfle": True}, "csfle (pymongocrypt)"),
    ]:
        category, reason = judge(conformance, skipped("runOnRequirements not satisfied", test=[requirement]), REPLICA_SET)
        assert (category, reason) == (conformance.MONGOD, f"runOnRequirements: needs {label}")


def test_a_version_range_that_includes_70_is_run_there(conformance: ModuleType) -> None:
    record = skipped("runOnRequirements not satisfied", test=[{"minServerVersion": "4.4", "maxServerVersion": "7.99"}])
    assert judge(conformance, record, STANDALONE | {"version": "8.0.1"}) == (conformance.EMBEDDED, "runOnRequirements: needs server <= 7.99")


def test_one_satisfied_alternative_is_enough_and_the_label_names_every_unmet_one(conformance: ModuleType) -> None:
    requirements = [{"topologies": ["sharded"]}, {"topologies": ["replicaset"], "minServerVersion": "4.0"}]
    record = skipped("TestUnifiedX runOnRequirements not satisfied", file=requirements)
    assert judge(conformance, record) == (conformance.EMBEDDED, "runOnRequirements: needs topology replicaset or topology sharded")


def test_a_file_level_skip_is_labelled_by_the_files_requirements_and_a_test_level_one_by_the_tests(conformance: ModuleType) -> None:
    replica_set, either = [{"topologies": ["replicaset"]}], [{"topologies": ["replicaset", "sharded"]}]
    file_level = judge(conformance, skipped("TestUnifiedX runOnRequirements not satisfied", file=replica_set, test=either))
    assert file_level == (conformance.EMBEDDED, "runOnRequirements: needs topology replicaset")
    test_level = judge(conformance, skipped("runOnRequirements not satisfied", file=[{"minServerVersion": "4.0"}], test=either))
    assert test_level == (conformance.EMBEDDED, "runOnRequirements: needs topology replicaset|sharded")


def test_a_test_70_would_skip_for_another_reason_is_labelled_by_that_reason(conformance: ModuleType) -> None:
    # The standalone fails the file's topology first; 7.0 runs the file but not this test (8.0 only).
    record = skipped("TestUnifiedX runOnRequirements not satisfied", file=[{"topologies": ["replicaset"]}], test=[{"minServerVersion": "8.0"}])
    assert judge(conformance, record) == (conformance.MONGOD, "runOnRequirements: needs server >= 8.0")


def test_the_specs_and_the_runners_own_skips_happen_on_any_server(conformance: ModuleType) -> None:
    by_spec = skipped("waiting on SERVER-1234", spec_skip_reason="waiting on SERVER-1234")
    by_runner = skipped("PyMongo does not support count()", runner_skip="PyMongo does not support count()")
    assert judge(conformance, by_spec) == (conformance.MONGOD, "waiting on SERVER-1234")
    assert judge(conformance, by_runner) == (conformance.MONGOD, "PyMongo does not support count()")


def test_fail_points_refused_are_skipped_only_here_unless_70_would_skip_the_test_anyway(conformance: ModuleType) -> None:
    message = "Test commands must be enabled to use fail points"
    assert judge(conformance, skipped(message)) == (conformance.EMBEDDED, message)
    assert judge(conformance, skipped(message, file=[{"topologies": ["sharded"]}]))[0] == conformance.MONGOD


def test_a_skip_nothing_explains_counts_against_the_server_under_test(conformance: ModuleType) -> None:
    bare = {"nodeid": "n", "area": "crud", "outcome": "skipped", "message": "Cannot connect to MongoDB on localhost:27017"}
    assert judge(conformance, bare) == (conformance.EMBEDDED, "Cannot connect to MongoDB on localhost:27017")


def test_server_parameters_are_compared_with_the_servers_values(conformance: ModuleType) -> None:
    requirement = [{"serverParameters": {"enableTestCommands": True}}]
    record = skipped("runOnRequirements not satisfied", test=requirement, server_parameters={"enableTestCommands": False})
    assert judge(conformance, record) == (conformance.EMBEDDED, "runOnRequirements: needs serverParameter enableTestCommands=true")


def test_versions_are_padded_as_pymongo_pads_them(conformance: ModuleType) -> None:
    assert conformance.parse_version("4.2") == (4, 2, 0)
    assert conformance.parse_version("4.3.99") == (4, 3, 99)
    assert conformance.parse_version("8.0.0-rc1") == (8, 0, 0)
    assert conformance.parse_version("-1.0.0") == (-1, 0, 0)


def raw_results() -> dict[str, Any]:
    records: list[dict[str, Any]] = [
        {"nodeid": "a", "area": "crud", "outcome": "passed", "message": ""},
        {"nodeid": "b", "area": "crud", "outcome": "passed", "message": ""},
        {"nodeid": "c", "area": "crud", "outcome": "passed", "message": ""},
        {"nodeid": "d", "area": "crud", "outcome": "failed", "message": "OperationFailure: Unsupported aggregation stage: $out, full error: {'ok': 0.0}"},
        skipped("runOnRequirements not satisfied", test=[{"minServerVersion": "8.0"}]),
        skipped("runOnRequirements not satisfied", test=[{"topologies": ["replicaset"]}]),
        {"nodeid": "e", "area": "sessions", "outcome": "xfailed", "message": ""},
        {"nodeid": "f", "area": "sessions", "outcome": "failed", "message": "AssertionError: <ChangeStream object at 0x7f3a2b> != 1\nmore"},
        {"nodeid": "g", "area": "sessions", "outcome": "failed", "message": "AssertionError: <ChangeStream object at 0x7f9999> != 1"},
    ]
    return {"profile": STANDALONE, "records": records}


def test_run_counts_passes_and_failures_only_and_groups_skips_and_failure_causes(conformance: ModuleType) -> None:
    results = conformance.summarize(raw_results(), ["crud", "sessions", "index_management"])
    crud, sessions, index = results["crud"], results["sessions"], results["index_management"]
    assert (crud.run, crud.passed, crud.failed, crud.skipped, crud.pass_rate) == (4, 3, 1, 2, 0.75)
    assert crud.embedded_only_skips == 1
    assert crud.failures == {"OperationFailure: Unsupported aggregation stage: $out": 1}
    # PyMongo's expected failures (APIs it does not have) are neither run nor skipped.
    assert (sessions.run, sessions.xfailed, sessions.skipped) == (2, 1, 0)
    assert sessions.failures == {"AssertionError: <ChangeStream object at 0x…> != 1": 2}
    assert (index.run, index.pass_rate) == (0, 0.0)
    document = crud.as_json()
    assert document["skip_reasons"][0]["count"] == 1 and {r["category"] for r in document["skip_reasons"]} == {"mongod", "embedded"}
    json.dumps(document)


def test_a_record_of_an_area_not_asked_for_is_an_error(conformance: ModuleType) -> None:
    with pytest.raises(ValueError, match="area"):
        conformance.summarize(raw_results(), ["crud"])


def minimums(**crud: Any) -> dict[str, Any]:
    return {"min_total_run": 6, "areas": {"crud": {"min_passed": 3, "min_pass_rate": 0.75, "max_embedded_only_skips": 1} | crud}}


def test_check_passes_at_the_minimums_and_names_each_figure_below_them(conformance: ModuleType) -> None:
    results = conformance.summarize(raw_results(), ["crud", "sessions"])
    assert conformance.check(results, minimums(), all_areas_ran=True) == []
    problems = conformance.check(
        results, minimums(min_passed=4, min_pass_rate=0.8, max_embedded_only_skips=0) | {"min_total_run": 7}, all_areas_ran=True
    )
    assert problems == [
        "crud: 3 passed, minimum 4",
        "crud: pass rate 75.0% (3/4), minimum 80.0%",
        "crud: 1 tests skipped only because of the server under test, at most 0 (a MongoDB 7.0 replica set runs them; see the skip reasons above)",
        "total: 6 tests run, minimum 7",
    ]


def test_check_of_a_partial_run_leaves_out_the_total_and_the_areas_not_run(conformance: ModuleType) -> None:
    results = conformance.summarize(raw_results(), ["crud", "sessions"])
    floor = minimums() | {"min_total_run": 1_000}
    floor["areas"]["index_management"] = {"min_passed": 1}
    assert conformance.check(results, floor, all_areas_ran=False) == []
    assert conformance.check(results, floor, all_areas_ran=True) == ["index_management: not run", "total: 6 tests run, minimum 1000"]


def test_the_committed_minimums_cover_every_area(conformance: ModuleType) -> None:
    floor = json.loads((ROOT / "bench" / "conformance_minimums.json").read_text())
    assert set(floor["areas"]) == set(conformance.AREAS)
    for area, figures in floor["areas"].items():
        assert {"min_passed", "min_pass_rate", "max_embedded_only_skips"} <= set(figures), area
        assert 0.0 <= figures["min_pass_rate"] <= 1.0, area
    assert floor["min_total_run"] > 0
