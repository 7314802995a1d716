"""``mongoshift dashboard --json``: its one JSON document is where it serves, printed once it listens (stdout held
nothing), so a script that parses stdout gets a document; the token stays on the terminal (stderr) alone."""

from __future__ import annotations

from ..cli.test_server_json import Served
from ..conftest import start_cli


def test_dashboard_json_is_its_url_once_it_listens(fast_project) -> None:  # type: ignore[no-untyped-def]
    served = Served(start_cli(fast_project, "dashboard", "--port", "0", "--json"))
    document = served.document()
    assert document == {"url": document["url"], "read_only": False} and str(document["url"]).startswith("http://127.0.0.1:")
    rest, err = served.stop()
    assert rest == [] and "mongoshift dashboard: stopped (SIGINT)" in err and "controls token (this run only, printed once): " in err
    assert all(str(document["url"]) not in line for line in rest)
