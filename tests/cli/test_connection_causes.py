"""A server that cannot be reached: the message says why (refused, DNS, TLS, timeout), exit 5 either way.

Only the reason is asserted, never how long the failure took: a refused single host fails at the
driver's first attempt, which the message shows by naming no timeout waited out."""

from __future__ import annotations

import json
import socket

import pytest
from pymongo.errors import AutoReconnect, NetworkTimeout, ServerSelectionTimeoutError

from mongoshift.project.server_errors import connection_cause, from_pymongo


def free_port() -> int:
    """A port nothing listens on: bound, then closed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def failure(result) -> dict:  # type: ignore[no-untyped-def, type-arg]
    assert "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout)["error"]  # type: ignore[no-any-return]


def test_a_refused_port_on_a_single_host_fails_at_once_and_says_refused(project, cli) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    project.write_config(connect_timeout_seconds=30)
    result = cli(project, "status", "--json", "--uri", f"mongodb://admin:s3cret@127.0.0.1:{port}/?directConnection=true")
    assert result.returncode == 5, result.stderr
    error = failure(result)
    assert error["kind"] == "connection_failed" and error["details"]["cause"] == "refused"
    assert f"127.0.0.1:{port}" in error["message"] and "connection refused" in error["message"]
    assert "within 30s" not in error["message"]  # the timeout was not waited out
    assert "s3cret" not in result.stdout + result.stderr


def test_an_unknown_host_says_the_name_does_not_resolve(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.write_config(connect_timeout_seconds=1)
    result = cli(project, "status", "--json", "--uri", "mongodb://db.mongoshift-test.invalid:27017/")
    assert result.returncode == 5, result.stderr
    error = failure(result)
    assert error["details"]["cause"] == "dns"
    assert "db.mongoshift-test.invalid:27017" in error["message"] and "does not resolve (DNS)" in error["message"]
    assert "ServerSelectionTimeoutError" not in error["message"]


def test_tls_against_a_server_without_tls_fails_at_once_and_says_tls(project, cli, mongo_uri: str) -> None:  # type: ignore[no-untyped-def]
    """``tls=true`` against the embedded server (or a mongod without TLS) hung until the timeout, then said "no answer
    in time": the server waited for a 33 MB message (the ClientHello read as a header), the client for its answer."""
    project.write_config(connect_timeout_seconds=30)
    uri = mongo_uri + ("&" if "?" in mongo_uri else "?") + "tls=true&tlsAllowInvalidCertificates=true"
    result = cli(project, "status", "--json", "--uri", uri)
    assert result.returncode == 5, result.stderr
    error = failure(result)
    assert error["kind"] == "connection_failed" and error["details"]["cause"] == "tls", error
    assert "the TLS handshake failed" in error["message"] and "check tls in the URI" in error["message"]
    assert "within 30s" not in error["message"]  # the first failed handshake ended it: the timeout was not waited out


def test_hosts_failing_for_different_causes_are_each_named(project, cli) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    project.write_config(connect_timeout_seconds=1)
    result = cli(project, "status", "--json", "--uri", f"mongodb://db.mongoshift-test.invalid:27017,127.0.0.1:{port}/")
    assert result.returncode == 5, result.stderr
    message = failure(result)["message"]
    assert "db.mongoshift-test.invalid:27017: the host name does not resolve" in message
    assert f"127.0.0.1:{port}: connection refused" in message


def test_the_uris_own_server_selection_timeout_is_the_wait_and_the_words(project, cli) -> None:  # type: ignore[no-untyped-def]
    """``serverSelectionTimeoutMS`` in the URI was overridden by ``connect_timeout_seconds`` (10 s by default), and the
    message said "within 10s". Two refused hosts: no single-host shortcut, the wait is waited out."""
    project.write_config(connect_timeout_seconds=20)
    hosts = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    for value, said in (("300", "within 0.3s"), ("250.5", "within 0.2505s")):  # the driver takes a fraction of a ms too
        result = cli(project, "status", "--json", "--uri", f"mongodb://{hosts}/?serverSelectionTimeoutMS={value}")
        assert result.returncode == 5, result.stderr
        error = failure(result)
        assert error["details"]["cause"] == "refused" and said in error["message"], error


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        (AutoReconnect("h:1: [Errno 111] Connect call failed ('127.0.0.1', 1) (configured timeouts: connectTimeoutMS: 1ms)"), "refused"),
        (AutoReconnect("h:1: [WinError 10061] No connection could be made because the target machine actively refused it"), "refused"),
        (AutoReconnect("x.invalid:27017: [Errno -2] Name or service not known (configured timeouts: socketTimeoutMS: 1ms)"), "dns"),
        (AutoReconnect("x.invalid:27017: [Errno 8] nodename nor servname provided, or not known"), "dns"),
        (AutoReconnect("SSL handshake failed: h:1: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed (_ssl.c:1000)"), "tls"),
        (NetworkTimeout("h:1: timed out (configured timeouts: socketTimeoutMS: 1ms)"), "timeout"),
        (ServerSelectionTimeoutError("No replica set members match selector, Timeout: 30s"), "timeout"),
        (AutoReconnect("connection closed"), "network"),
    ],
)
def test_the_cause_is_read_from_the_drivers_words(error: Exception, cause: str) -> None:
    assert connection_cause(error) == cause


def test_a_connection_lost_during_a_run_says_its_cause() -> None:
    error = from_pymongo(AutoReconnect("h:1: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed"))
    assert error.details == {"cause": "tls"} and "TLS handshake failed (CERTIFICATE_VERIFY_FAILED)" in error.message
    assert int(error.exit_code) == 5


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ("badopt=1&directConnection=true", "unknown option 'badopt'"),
        ("tls=maybe", "The value of tls must be"),
        ("authMechanism=NOPE", "authmechanism must be in"),
        # a file option naming what cannot be read: the driver raises an OSError, not its own error
        ("tls=true&tlsCAFile=/nonexistent/ca.pem", "tlscafile file is not readable"),
        ("tls=true&tlsCertificateKeyFile=/", "tlscertificatekeyfile file is not readable"),
    ],
)
def test_a_uri_option_the_driver_does_not_take_is_refused_with_exit_6(project, cli, options: str, said: str) -> None:  # type: ignore[no-untyped-def]
    """The driver warns about an unknown option on stderr (a Python warning with its source line) and
    drops it, and ignores a bad ``tls``: the command ran as if the option were not there."""
    host = project.uri.split("://", 1)[1].split("/", 1)[0]
    result = cli(project, "status", "--json", "--uri", f"mongodb://admin:opt-hunter14@{host}/?{options}")
    assert result.returncode == 6, result.stderr
    error = json.loads(result.stdout)["error"]
    assert error["kind"] == "config_invalid" and said in error["message"]
    assert "opt-hunter14" not in result.stdout + result.stderr and "UserWarning" not in result.stderr
