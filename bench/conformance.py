"""Conformance: MongoDB's own unified-format specification tests, with PyMongo's own runner, against a server.

Run from the repository root::

    python bench/conformance.py                                   # a fresh embedded server
    python bench/conformance.py --json conformance.json --check bench/conformance_minimums.json
    python bench/conformance.py --uri "mongodb://host:27017/?replicaSet=rs0"   # a real server
    python bench/conformance.py --areas crud,sessions --verbose

It fetches the source distribution of the *installed* pymongo with pip (``pip download
--no-binary pymongo --no-deps pymongo==<version>``) into a cache folder (``--cache``; default
``$XDG_CACHE_HOME/mongoshift/conformance`` or ``~/.cache/mongoshift/conformance``), unpacks its
``test/`` package once, and runs with pytest the unified-format tests of the areas in ``AREAS``.
It prints per area: run / passed / failed / skipped (pass rate = passed / run; skips and PyMongo's
own expected failures are not run), the skip reasons grouped, and the most frequent failure causes.

Every skip is judged: would a MongoDB 7.0 single-node replica set (no auth, test commands enabled,
this driver and its optional packages) skip it too (its ``runOnRequirements`` exclude that server,
the spec itself skips it, or PyMongo's runner skips it on any server), or is it skipped **only
because of the server under test** ("embedded-only")? docs/embedded.md ("Conformance") lists those
reasons. ``--check FILE`` compares the figures with committed minimums (``conformance_minimums.json``:
per area the passed count, the pass rate and the most embedded-only skips; the total run) and exits
1, saying which figure of which area fell short.

What is changed in PyMongo's harness, all of it plumbing (``_conformance_plugin.py``); no test, no
expectation and no part of the runner's logic is touched:

1. Only ``test/`` and ``pyproject.toml`` of the source distribution are unpacked, so that the
   installed driver (with its C extensions) is the one tested, not the sdist's copy of its source.
2. PyMongo's pytest settings are used, except ``addopts`` (a JUnit file, ``-m "default or
   default_async"``): the tests are selected by the plugin instead, since that marker expression
   leaves out index_management, whose module is marked ``search_index`` as a whole.
3. The server: ``DB_IP``/``DB_PORT`` (and ``DB_USER``/``DB_PASSWORD`` when the URI has them) are
   taken from ``--uri``'s first host, or from the embedded server started here; the harness then
   discovers a replica set from ``hello`` as it always does.
4. When the server refuses ``buildinfo`` or ``getParameter`` with 59, the harness's start-up read of
   them is answered from ``buildInfo`` and from whether ``configureFailPoint`` works (reported as
   ``fallbacks``; inert on a server that has both).
5. Only the classes generated from the unified-format files of the areas run; the other tests of
   the same modules (prose tests, legacy formats) are deselected.
6. Each test gets a timeout (``--test-timeout``, 30 s, pytest-timeout): a test that hangs (a change
   stream waiting for an event the server never sends) fails instead of stopping the run.
7. ``--workers N`` runs pytest-xdist with one embedded server per worker (tests of a file share
   collection names and fail points are server-wide, so workers never share a server); with
   ``--uri`` the run is sequential.
8. ``test_transactions_unified`` generates ``transactions/unified`` and
   ``transactions-convenient-api/unified`` into one module, and the two ``commit.json`` and
   ``transaction-options.json`` give the same class names: PyMongo's own run loses 20 transactions
   tests that way. The plugin renames the later class (area in front) so that both run.
9. The plugin records each test's outcome and the facts its skip is judged by, written as JSON.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

#: area → PyMongo's sync test module that generates its unified-format test classes.
AREAS: dict[str, str] = {
    "crud": "test/test_crud_unified.py",
    "transactions": "test/test_transactions_unified.py",
    "transactions-convenient-api": "test/test_transactions_unified.py",
    "change_streams": "test/test_change_stream.py",
    "retryable_writes": "test/test_retryable_writes_unified.py",
    "retryable_reads": "test/test_retryable_reads_unified.py",
    "sessions": "test/test_sessions_unified.py",
    "command_monitoring": "test/test_command_monitoring.py",
    "read_write_concern": "test/test_read_write_concern_spec.py",
    "index_management": "test/test_index_management.py",
}

#: A skip is "mongod" when this server would skip the test too, "embedded" when only the server under test does.
MONGOD = "mongod"
EMBEDDED = "embedded"
RUN_ON_SUFFIX = "runOnRequirements not satisfied"
BENCH = Path(__file__).resolve().parent
PIP_TIMEOUT = 900.0
#: The longest passing test took 1.4 s on 2 busy cores; a change stream waiting for an event the server
#: never sends (drop, rename, DDL events on the embedded server) waits forever, and each would cost this.
TEST_TIMEOUT = 30
EXIT_CHECK_FAILED = 1
EXIT_UNAVAILABLE = 2


class SdistUnavailable(RuntimeError):
    """PyMongo's source distribution could not be obtained (network, package index, pip)."""


# ---------------------------------------------------------------------------------------------
# Judging a skip: runOnRequirements against the server under test and against MongoDB 7.0.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerProfile:
    """What PyMongo's runner knows of a server when it evaluates ``runOnRequirements``."""

    version: tuple[int, int, int]
    topology: str  # single | replicaset | sharded | load-balanced
    auth: bool = False
    test_commands: bool = True
    csfle: bool = False
    #: serverParameters of the requirements; None: unknown, taken as satisfied.
    parameters: Mapping[str, Any] | None = None

    @classmethod
    def from_record(cls, profile: Mapping[str, Any], parameters: Mapping[str, Any] | None = None) -> ServerProfile:
        return cls(
            version=parse_version(str(profile.get("version", "0"))),
            topology=str(profile.get("topology", "single")),
            auth=bool(profile.get("auth", False)),
            test_commands=bool(profile.get("test_commands", False)),
            csfle=bool(profile.get("csfle", False)),
            parameters=parameters,
        )


def reference_server(csfle: bool) -> ServerProfile:
    """A MongoDB 7.0 single-node replica set as drivers test against: no auth, test commands on.
    ``csfle`` is the driver environment's (the same driver would talk to it)."""
    return ServerProfile(version=(7, 0, 0), topology="replicaset", auth=False, test_commands=True, csfle=csfle)


def parse_version(text: str) -> tuple[int, int, int]:
    """``"4.2"`` → (4, 2, 0), as PyMongo's ``Version.from_string`` pads it; a suffix (``-rc0``) is ignored."""
    found = re.match(r"(-?\d+)(?:\.(\d+))?(?:\.(\d+))?", text.strip())
    if found is None:
        raise ValueError(f"not a server version: {text!r}")
    major, minor, patch = (int(part or 0) for part in found.groups())
    return major, minor, patch


def unmet(requirement: Mapping[str, Any], server: ServerProfile) -> list[str]:
    """The conditions of one ``runOnRequirements`` entry that ``server`` does not meet, as PyMongo's
    ``is_run_on_requirement_satisfied`` evaluates them (``serverless`` is not evaluated there either)."""
    missing: list[str] = []
    topologies = requirement.get("topologies")
    if topologies and server.topology not in topologies:
        missing.append("topology " + "|".join(sorted(topologies)))
    low = requirement.get("minServerVersion")
    if low and server.version < parse_version(str(low)):
        missing.append(f"server >= {low}")
    high = requirement.get("maxServerVersion")
    if high and server.version > parse_version(str(high)):
        missing.append(f"server <= {high}")
    for name, value in (requirement.get("serverParameters") or {}).items():
        if server.parameters is not None and server.parameters.get(name) != value:
            missing.append(f"serverParameter {name}={json.dumps(value)}")
    auth = requirement.get("auth")
    if auth is True and not server.auth:
        missing.append("auth")
    elif auth is False and server.auth:
        missing.append("no auth")
    csfle = requirement.get("csfle")
    if csfle is True and not (server.csfle and server.version >= (4, 2, 0)):
        missing.append("csfle (pymongocrypt)")
    elif isinstance(csfle, Mapping) and not server.csfle:
        missing.append("csfle (libmongocrypt)")
    return missing


def satisfied(requirements: Sequence[Mapping[str, Any]] | None, server: ServerProfile) -> bool:
    return not requirements or any(not unmet(requirement, server) for requirement in requirements)


def requirements_label(requirements: Sequence[Mapping[str, Any]], server: ServerProfile) -> str:
    """One line naming what the server lacks, the same for every test that lacks the same."""
    alternatives = sorted({" and ".join(unmet(requirement, server)) for requirement in requirements} - {""})
    return "runOnRequirements: needs " + (" or ".join(alternatives) or "nothing the runner reported")


@dataclass(frozen=True)
class Skip:
    category: str  # MONGOD or EMBEDDED
    label: str


def classify_skip(record: Mapping[str, Any], server: ServerProfile) -> Skip:
    """Why a test was skipped, and whether a MongoDB 7.0 single-node replica set would skip it too.

    The reference skips it when the spec says so (``skipReason``), when PyMongo's runner skips it on
    any server (``runner_skip``: unsupported driver API, known driver issue) or when its own
    ``runOnRequirements`` (the file's or the test's) exclude 7.0 on a replica set; the label is then
    the reference's reason. Any other skip, including one this script cannot explain, is counted
    against the server under test, labelled with the reason the run gave."""
    file_requirements: list[Mapping[str, Any]] = list(record.get("file_requirements") or [])
    test_requirements: list[Mapping[str, Any]] = list(record.get("test_requirements") or [])
    reference = reference_server(server.csfle)
    for requirements in (file_requirements, test_requirements):
        if not satisfied(requirements, reference):
            return Skip(MONGOD, requirements_label(requirements, reference))
    for reason in (record.get("runner_skip"), record.get("spec_skip_reason")):
        if reason is not None:
            return Skip(MONGOD, str(reason))
    message = str(record.get("message", ""))
    if message.endswith(RUN_ON_SUFFIX):
        actual = ServerProfile(
            version=server.version,
            topology=server.topology,
            auth=server.auth,
            test_commands=server.test_commands,
            csfle=server.csfle,
            parameters=record.get("server_parameters") or {},
        )
        return Skip(EMBEDDED, requirements_label(test_requirements if message == RUN_ON_SUFFIX else file_requirements, actual))
    return Skip(EMBEDDED, message.strip() or "(no reason given)")


# ---------------------------------------------------------------------------------------------
# Results: per area, from the plugin's records.
# ---------------------------------------------------------------------------------------------


def failure_cause(message: str) -> str:
    """A failure message without the server's full reply and the test's values, to group by."""
    first = message.strip().splitlines()[0] if message.strip() else "(no message)"
    first = first.split(", full error:")[0]
    return re.sub(r"0x[0-9a-fA-F]+", "0x…", first)[:160]


@dataclass
class AreaResult:
    area: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    xfailed: int = 0
    skips: Counter[tuple[str, str]] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)

    @property
    def run(self) -> int:
        return self.passed + self.failed

    @property
    def pass_rate(self) -> float:
        return self.passed / self.run if self.run else 0.0

    @property
    def embedded_only_skips(self) -> int:
        return sum(count for (category, _), count in self.skips.items() if category == EMBEDDED)

    def as_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "passed": self.passed,
            "failed": self.failed,
            "skipped": self.skipped,
            "expected_failures": self.xfailed,
            "pass_rate": round(self.pass_rate, 4),
            "embedded_only_skips": self.embedded_only_skips,
            "skip_reasons": [
                {"category": category, "reason": label, "count": count}
                for (category, label), count in sorted(self.skips.items(), key=lambda kv: (-kv[1], kv[0]))
            ],
            "failure_causes": [{"cause": cause, "count": count} for cause, count in self.failures.most_common()],
        }


def summarize(raw: Mapping[str, Any], areas: Iterable[str]) -> dict[str, AreaResult]:
    """The plugin's raw records, counted per area; every skip classified."""
    results = {area: AreaResult(area) for area in areas}
    server = ServerProfile.from_record(raw.get("profile") or {})
    for record in raw.get("records", []):
        area = record.get("area")
        if area not in results:
            raise ValueError(f"a result of an area that was not asked for: {area!r} ({record.get('nodeid')})")
        result = results[area]
        outcome = record.get("outcome")
        if outcome == "passed":
            result.passed += 1
        elif outcome == "failed":
            result.failed += 1
            result.failures[failure_cause(str(record.get("message", "")))] += 1
        elif outcome == "skipped":
            result.skipped += 1
            skip = classify_skip(record, server)
            result.skips[(skip.category, skip.label)] += 1
        elif outcome == "xfailed":
            result.xfailed += 1
        else:
            raise ValueError(f"unknown outcome {outcome!r} ({record.get('nodeid')})")
    return results


def check(results: Mapping[str, AreaResult], minimums: Mapping[str, Any], all_areas_ran: bool) -> list[str]:
    """Every figure below its minimum (above, for embedded-only skips), one message each."""
    problems: list[str] = []
    for area, floor in minimums.get("areas", {}).items():
        result = results.get(area)
        if result is None:
            if all_areas_ran:
                problems.append(f"{area}: not run")
            continue
        if result.passed < int(floor.get("min_passed", 0)):
            problems.append(f"{area}: {result.passed} passed, minimum {floor['min_passed']}")
        min_rate = float(floor.get("min_pass_rate", 0.0))
        if result.pass_rate + 1e-9 < min_rate:
            problems.append(f"{area}: pass rate {result.pass_rate:.1%} ({result.passed}/{result.run}), minimum {min_rate:.1%}")
        most = floor.get("max_embedded_only_skips")
        if most is not None and result.embedded_only_skips > int(most):
            problems.append(
                f"{area}: {result.embedded_only_skips} tests skipped only because of the server under test, at most {most} "
                "(a MongoDB 7.0 replica set runs them; see the skip reasons above)"
            )
    if all_areas_ran:
        run = sum(result.run for result in results.values())
        least = int(minimums.get("min_total_run", 0))
        if run < least:
            problems.append(f"total: {run} tests run, minimum {least}")
    return problems


# ---------------------------------------------------------------------------------------------
# Output.
# ---------------------------------------------------------------------------------------------


def render(results: Mapping[str, AreaResult], top_failures: int = 5) -> str:
    header = f"{'area':<28} {'run':>5} {'passed':>6} {'failed':>6} {'skipped':>7} {'xfail':>5} {'rate':>7} {'skipped only here':>18}"
    lines = [header, "-" * len(header)]
    total = AreaResult("total")
    for result in results.values():
        lines.append(_row(result))
        total.passed += result.passed
        total.failed += result.failed
        total.skipped += result.skipped
        total.xfailed += result.xfailed
        total.skips.update(result.skips)
    lines += ["-" * len(header), _row(total), ""]
    for result in results.values():
        if not result.skips and not result.failures:
            continue
        lines.append(f"{result.area}:")
        for (category, label), count in sorted(result.skips.items(), key=lambda kv: (kv[0][0] != EMBEDDED, -kv[1], kv[0][1])):
            who = "skipped only here" if category == EMBEDDED else "7.0 skips it too"
            lines.append(f"  skip  {count:>4}  [{who}] {label}")
        for cause, count in result.failures.most_common(top_failures):
            lines.append(f"  fail  {count:>4}  {cause}")
        if len(result.failures) > top_failures:
            lines.append(f"  fail  {sum(result.failures.values()) - sum(c for _, c in result.failures.most_common(top_failures)):>4}  (other causes)")
    return "\n".join(lines)


def _row(result: AreaResult) -> str:
    rate = f"{result.pass_rate:.1%}" if result.run else "-"
    return (
        f"{result.area:<28} {result.run:>5} {result.passed:>6} {result.failed:>6} {result.skipped:>7} "
        f"{result.xfailed:>5} {rate:>7} {result.embedded_only_skips:>18}"
    )


# ---------------------------------------------------------------------------------------------
# PyMongo's tests: the sdist, cached.
# ---------------------------------------------------------------------------------------------


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mongoshift" / "conformance"


def fetch_sdist(cache: Path, version: str) -> Path:
    """``pymongo-<version>.tar.gz`` in ``cache``, downloaded with pip the first time."""
    cache.mkdir(parents=True, exist_ok=True)
    sdist = cache / f"pymongo-{version}.tar.gz"
    if sdist.is_file():
        return sdist
    print(f"downloading PyMongo {version}'s source distribution with pip (once; cached in {cache})", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        # --no-binary pymongo, not :all:, which would also build pip's own build tools from source (minutes).
        command = [sys.executable, "-m", "pip", "download", "--no-binary", "pymongo", "--no-deps", "--dest", tmp, f"pymongo=={version}"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT, check=False)
        except subprocess.TimeoutExpired as exc:
            raise SdistUnavailable(f"pip did not download pymongo=={version}'s source distribution within {PIP_TIMEOUT:.0f} s") from exc
        found = list(Path(tmp).glob("pymongo-*.tar.gz"))
        if done.returncode != 0 or len(found) != 1:
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-6:])
            raise SdistUnavailable(
                f"pip could not download pymongo=={version}'s source distribution (exit {done.returncode}); "
                f"the network or the package index may be unreachable. pip said:\n{tail}"
            )
        os.replace(found[0], sdist)
    return sdist


def unpack_tests(cache: Path, sdist: Path, version: str) -> Path:
    """The sdist's ``test/`` package and ``pyproject.toml`` (its pytest settings), unpacked once."""
    target = cache / f"pymongo-{version}-tests"
    if (target / "test" / "unified_format.py").is_file():
        return target
    with tempfile.TemporaryDirectory(dir=cache) as tmp, tarfile.open(sdist) as archive:
        prefix = f"pymongo-{version}/"
        wanted = [m for m in archive.getmembers() if m.name.startswith(prefix + "test/") or m.name == prefix + "pyproject.toml"]
        if not wanted:
            raise SdistUnavailable(f"{sdist.name} has no test/ folder")
        archive.extractall(tmp, members=wanted, filter="data")
        if target.exists():
            shutil.rmtree(target)
        os.replace(Path(tmp) / f"pymongo-{version}", target)
    return target


# ---------------------------------------------------------------------------------------------
# The run.
# ---------------------------------------------------------------------------------------------


def server_env(uri: str) -> dict[str, str]:
    """PyMongo's harness variables for ``uri``: its first host, and its credentials if any."""
    from pymongo.uri_parser import parse_uri

    if uri.startswith("mongodb+srv://"):
        raise SystemExit("--uri: give a mongodb:// URI (PyMongo's harness takes one host and port)")
    parsed = parse_uri(uri)
    host, port = parsed["nodelist"][0]
    env = {"servers": f"{host}:{port}"}
    if parsed.get("username"):
        env["DB_USER"] = str(parsed["username"])
        env["DB_PASSWORD"] = str(parsed.get("password") or "")
    return env


def run_pytest(tests: Path, areas: Sequence[str], servers: Sequence[str], extra_env: Mapping[str, str], args: argparse.Namespace) -> dict[str, Any]:
    modules = sorted({AREAS[area] for area in areas})
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.json"
        log = args.cache / "last-run.log"
        env = os.environ | dict(extra_env) | {
            "MONGOSHIFT_CONFORMANCE_SERVERS": ",".join(servers),
            "MONGOSHIFT_CONFORMANCE_OUT": str(out),
            "MONGOSHIFT_CONFORMANCE_AREAS": ",".join(areas),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(BENCH), os.environ.get("PYTHONPATH")])),
        }
        command = [
            sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-rN",
            "-p", "no:cacheprovider", "-p", "no:mongoshift", "-p", "_conformance_plugin",
            "--timeout", str(args.test_timeout),
        ]
        if len(servers) > 1:
            command += ["-n", str(len(servers))]
        with log.open("w") as sink:
            done = subprocess.run([*command, *modules], cwd=tests, env=env, stdout=None if args.verbose else sink, stderr=subprocess.STDOUT, check=False)
        # 0: all passed, 1: some failed; anything else is pytest not running the tests at all.
        if done.returncode not in (0, 1) or not out.is_file():
            raise SystemExit(f"PyMongo's tests did not run (pytest exit {done.returncode}); see {log}")
        raw: dict[str, Any] = json.loads(out.read_text())
        return raw


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--uri", help="the server to test (default: a fresh embedded server per worker)")
    parser.add_argument("--cache", type=Path, default=default_cache(), help="where PyMongo's source distribution is kept")
    parser.add_argument("--areas", default=",".join(AREAS), help="comma-separated subset of: " + ", ".join(AREAS))
    parser.add_argument(
        "--workers", type=int, help="pytest-xdist workers, each with its own embedded server (default: 2, or 1 on one CPU; not with --uri)"
    )
    parser.add_argument(
        "--test-timeout", type=int, default=TEST_TIMEOUT, help=f"seconds after which one test fails as hung (default {TEST_TIMEOUT})"
    )
    parser.add_argument("--json", type=Path, help="write the figures as JSON")
    parser.add_argument("--check", type=Path, help="minimums file: exit 1 when a figure is below its minimum")
    parser.add_argument("--records", type=Path, help="write every test's record (outcome, message, the facts its skip is judged by)")
    parser.add_argument("--judge", type=Path, metavar="RECORDS", help="count and judge a --records file again instead of running the tests")
    parser.add_argument("--verbose", action="store_true", help="show pytest's output instead of writing it to the cache's last-run.log")
    args = parser.parse_args(argv)
    unknown = set(args.areas.split(",")) - set(AREAS)
    if unknown:
        parser.error(f"unknown areas: {', '.join(sorted(unknown))}")
    if args.uri and args.workers not in (None, 1):
        parser.error("--workers needs the embedded server: tests of one server share names and fail points")
    if args.workers is None:
        args.workers = 1 if args.uri else min(2, os.cpu_count() or 1)
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    areas = [area for area in AREAS if area in args.areas.split(",")]
    version = importlib.metadata.version("pymongo")
    minimums: dict[str, Any] | None = json.loads(args.check.read_text()) if args.check else None
    started = time.perf_counter()
    if args.judge:
        raw: dict[str, Any] = json.loads(args.judge.read_text())
        version, workers = str(raw.get("pymongo", version)), int(raw.get("workers", 0))
    else:
        try:
            tests = unpack_tests(args.cache, fetch_sdist(args.cache, version), version)
        except SdistUnavailable as exc:
            print(f"conformance: cannot get PyMongo's tests: {exc}", file=sys.stderr)
            return EXIT_UNAVAILABLE
        with ExitStack() as stack:
            if args.uri:
                env = server_env(args.uri)
                servers = [env.pop("servers")]
            else:
                from mongoshift.embedded.process import embedded_server

                env = {}
                servers = [server_env(stack.enter_context(embedded_server()))["servers"] for _ in range(args.workers)]
            raw = run_pytest(tests, areas, servers, env, args)
            raw |= {"pymongo": version, "workers": len(servers), "server": "uri" if args.uri else "embedded"}
        workers = len(servers)
        raw["seconds"] = round(time.perf_counter() - started)
    if args.records:
        args.records.write_text(json.dumps(raw, indent=1) + "\n")
    elapsed = float(raw.get("seconds", 0))
    results = summarize(raw, areas)
    profile = raw.get("profile", {})
    print(
        f"PyMongo {version} unified-format tests, {'server given by --uri' if raw.get('server') == 'uri' else 'embedded server'} "
        f"(reports {profile.get('version')}, topology {profile.get('topology')}, test commands "
        f"{'on' if profile.get('test_commands') else 'off'}), {workers} worker(s), {elapsed:.0f} s"
    )
    if not args.judge and not args.verbose:
        print(f"pytest's output, with each failure's traceback: {args.cache / 'last-run.log'}")
    if profile.get("fallbacks"):
        print(f"the server refuses {', '.join(profile['fallbacks'])} (59): the harness read its facts another way")
    print()
    print(render(results))
    if args.json:
        document = {
            "pymongo": version,
            "date": datetime.now(UTC).date().isoformat(),
            "server": raw.get("server"),
            "profile": profile,
            "workers": workers,
            "seconds": round(elapsed),
            "total_run": sum(result.run for result in results.values()),
            "areas": {area: result.as_json() for area, result in results.items()},
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    if minimums is not None:
        problems = check(results, minimums, all_areas_ran=len(areas) == len(AREAS))
        print()
        if problems:
            print(f"conformance below the minimums of {args.check}:")
            print("\n".join(f"  {problem}" for problem in problems))
            return EXIT_CHECK_FAILED
        print(f"conformance meets the minimums of {args.check}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
