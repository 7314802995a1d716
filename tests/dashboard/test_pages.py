"""The dashboard over HTTP (httpx on the ASGI app): pages without JavaScript, the live stream, controls and their rules."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from mongoshift.api import connect, migrations as command
from mongoshift.dashboard.security import is_loopback

from ..background.conftest import background_file, seed
from .conftest import NAME, TOKEN, csrf_of, first_events, make_app, reads_per_poll, sign_in

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


async def test_the_overview_and_a_migration_page_render_whole_without_javascript(registered, counted_client, http) -> None:  # type: ignore[no-untyped-def]
    client, _ = counted_client
    async with connect(registered.settings()) as ms:
        await ms.background.run([NAME])
    app = make_app(registered, client)
    web = http(app)
    overview = await web.get("/")
    assert overview.status_code == 200
    assert NAME in overview.text and 'data-testid="status">completed' in overview.text
    assert "applied 1" in overview.text  # the line's counts
    assert overview.headers["cache-control"] == "no-store" and "frame-ancestors 'none'" in overview.headers["content-security-policy"]
    page = await web.get(f"/migrations/{NAME.removesuffix('.py')}")
    assert page.status_code == 200
    assert 'data-testid="partitions"' in page.text and 'data-testid="chart"' in page.text  # samples recorded by the run
    assert 'data-testid="migrated">300</span> migrated' in page.text
    assert (await web.get("/migrations/0009_nope")).status_code == 404


async def test_the_charts_rate_of_a_short_run_is_the_headers_rate(registered, counted_client, http, db) -> None:  # type: ignore[no-untyped-def]
    """A run of 0.75 s in one sample bucket: the chart's peak is its documents over 0.75 s, as the header
    says, not over the bucket's 10 s (the run's window set on the state, so no clock decides the bucket)."""
    client, _ = counted_client
    async with connect(registered.settings()) as ms:
        await ms.background.run([NAME])
    t0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
    sample = {"at": t0, "scanned": 300, "migrated": 300, "failed": 0, "conflicts": 0}
    window = {"started_at": t0 + timedelta(seconds=3.2), "completed_at": t0 + timedelta(seconds=3.95), "samples": [sample]}
    await db["_mongoshift_background"].update_one({"_id": NAME}, {"$set": window})
    page = await http(make_app(registered, client)).get(f"/migrations/{NAME.removesuffix('.py')}")
    assert "400.0 docs/s ·" in page.text  # the header: 300 scanned over 0.75 s
    assert ">400.0 docs/s</text>" in page.text  # the chart's peak, the same


async def test_the_time_left_reads_as_the_clis(registered, counted_client, http, db) -> None:  # type: ignore[no-untyped-def]
    """The ETA beside a running migration's progress is ``H:MM:SS``, as ``background status`` and the progress
    lines print it (one format, ``project.wording.clock``), on the overview and on the migration's page."""
    client, _ = counted_client
    async with connect(registered.settings()) as ms:
        await ms.background.run([NAME])
    # 300 scanned over some 100 s, an estimate of a million: hours left, whatever the clock adds
    running = {"status": "running", "completed_at": None, "started_at": datetime.now(UTC) - timedelta(seconds=100), "plan.estimate": 1_000_000}
    await db["_mongoshift_background"].update_one({"_id": NAME}, {"$set": running})
    web = http(make_app(registered, client))
    page = await web.get(f"/migrations/{NAME.removesuffix('.py')}")
    assert re.search(r"docs/s · \d+:\d\d:\d\d left", page.text)
    overview = await web.get("/")
    assert re.search(r"<td>\d+:\d\d:\d\d</td>", overview.text)
    assert not re.search(r"\d+h \d\dm|\d+m \d\ds", page.text + overview.text)


async def test_a_file_deployed_after_the_dashboard_started_is_shown_pending(registered, counted_client, http) -> None:  # type: ignore[no-untyped-def]
    """The dashboard's session read the migrations folder once: a file deployed while it ran was never
    shown, while ``mongoshift status`` (and the tenants view) said it was pending."""
    client, _ = counted_client
    app = make_app(registered, client)
    web = http(app)
    assert "pending 1" not in (await web.get("/")).text
    registered.add("0002_later.py", "def up(ctx):\n    pass\n")
    await (await app.state.dashboard.poller()).refresh()  # the next poll, without waiting for its interval
    page = await web.get("/")
    assert re.search(r'class="badge state-pending">pending 1<', page.text), page.text


async def test_the_event_stream_sends_the_live_part_of_a_page(registered, counted_client) -> None:  # type: ignore[no-untyped-def]
    client, _ = counted_client
    app = make_app(registered, client)
    try:
        (event,) = await first_events(app, "/events")
        assert event.startswith("event: update\n") and "data: " in event and NAME in event
        (detail,) = await first_events(app, f"/events?name={NAME}")
        assert 'data-testid="status">pending' in detail
    finally:
        await app.state.dashboard.aclose()


async def test_fifty_open_pages_cost_the_reads_of_one(registered, counted_client, http) -> None:  # type: ignore[no-untyped-def]
    """One polling loop feeds every open page: the reads per poll do not grow with the viewers."""
    client, reads = counted_client
    async with connect(registered.settings()) as ms:
        await ms.background.control(NAME, "pause")  # a still state: every poll reads the same
    app = make_app(registered, client)
    http(app)  # closes the app at the end
    one = await reads_per_poll(app, reads, f"/events?name={NAME}", 1)
    fifty = await reads_per_poll(app, reads, f"/events?name={NAME}", 50)
    assert one > 0
    assert fifty <= one * 1.2, (one, fifty)


async def test_a_signed_message_shows_only_on_the_page_it_was_signed_for(registered, counted_client, http, db) -> None:  # type: ignore[no-untyped-def]
    """A control's signed ``said``/``sig`` pair, replayed on another migration's page or on the overview, shows
    nothing there; on its own page it shows by either spelling of the migration's name."""
    client, _ = counted_client
    await seed(db.pets, 10)
    registered.add("0002_pets.py", background_file(batch_size=50).replace('collection="people"', 'collection="pets"'))
    await command.up(registered.settings())
    web = http(make_app(registered, client))
    csrf = await sign_in(web)
    done = await web.post(f"/migrations/{NAME}/control", data={"csrf": csrf, "action": "pause"})
    assert done.status_code == 303
    query = done.headers["location"].partition("?")[2]
    assert "pause: done" in (await web.get(f"/migrations/{NAME.removesuffix('.py')}?{query}")).text
    other = await web.get(f"/migrations/0002_pets?{query}")
    assert other.status_code == 200 and 'data-testid="said"' not in other.text
    assert 'data-testid="said"' not in (await web.get(f"/?{query}")).text


async def test_controls_need_the_token_and_a_form_of_this_dashboard(registered, counted_client, http, db) -> None:  # type: ignore[no-untyped-def]
    client, _ = counted_client
    web = http(make_app(registered, client))
    page = await web.get(f"/migrations/{NAME}")
    csrf = csrf_of(page.text)
    # no token: refused, nothing changed
    refused = await web.post(f"/migrations/{NAME}/control", data={"csrf": csrf, "action": "pause"})
    assert refused.status_code == 403 and "token" in refused.text
    # a wrong token at sign-in is refused too
    assert (await web.post("/sign-in", data={"csrf": csrf, "token": "not-the-token-at-all"})).status_code == 403
    await sign_in(web)
    # a forged cross-site POST: no CSRF value of this browser, another origin
    forged = await web.post(f"/migrations/{NAME}/control", data={"action": "pause"}, headers={"origin": "https://evil.example"})
    assert forged.status_code == 403 and "CSRF" in forged.text
    wrong_csrf = await web.post(f"/migrations/{NAME}/control", data={"csrf": "guessed", "action": "pause"})
    assert wrong_csrf.status_code == 403
    cross = await web.post(f"/migrations/{NAME}/control", data={"csrf": csrf, "action": "pause"}, headers={"sec-fetch-site": "cross-site"})
    assert cross.status_code == 403
    state = await db["_mongoshift_background"].find_one({"_id": NAME})
    assert state["status"] == "pending"
    done = await web.post(f"/migrations/{NAME}/control", data={"csrf": csrf, "action": "pause", "reason": "peak hours"})
    assert done.status_code == 303
    state = await db["_mongoshift_background"].find_one({"_id": NAME})
    assert state["status"] == "paused"
    entry = state["history"][-1]
    assert (entry["action"], entry["by"], entry["reason"]) == ("pause", "dashboard 127.0.0.1", "peak hours")
    shown = await web.get(done.headers["location"])
    assert "pause: done; now paused" in shown.text
    crafted = await web.get(f"/migrations/{NAME}?said=call+this+number&sig=0000")
    assert "call this number" not in crafted.text  # only the dashboard's own signed messages are shown
    # the same rules as the CLI: resume of a running one... here, a cancel without its confirmation is refused
    unconfirmed = await web.post(f"/migrations/{NAME}/control", data={"csrf": csrf, "action": "cancel"})
    assert unconfirmed.status_code == 400
    conflict = await web.post(f"/migrations/{NAME}/control", data={"csrf": csrf, "action": "retry"})
    assert "refused (exit 33)" in (await web.get(conflict.headers["location"])).text
    throttled = await web.post(f"/migrations/{NAME}/throttle", data={"csrf": csrf, "batch_size": "20", "pause_ms": ""})
    assert throttled.status_code == 303
    assert (await db["_mongoshift_background"].find_one({"_id": NAME}))["throttle"] == {"batch_size": 20}
    assert "throttle: done; pace now batch size 20" in (await web.get(throttled.headers["location"])).text  # not batch_size 20
    bad = await web.post(f"/migrations/{NAME}/throttle", data={"csrf": csrf, "batch_size": "0"})
    refusal = (await web.get(bad.headers["location"])).text
    assert "refused (exit 53): throttle: Batch size must be a whole number from 1 to 10,000, not 0" in refusal
    assert "batch_size" not in refusal.partition('data-testid="said"')[2].partition("</p>")[0]  # the form's label, not a flag or parameter
    for odd in ("\u0661\u0662", "1_000", "\uff15"):  # Arabic-Indic, an underscore, a full-width digit: int() takes all three
        refused = await web.post(f"/migrations/{NAME}/throttle", data={"csrf": csrf, "batch_size": odd})
        assert refused.status_code == 400 and "whole numbers" in refused.text
    assert (await db["_mongoshift_background"].find_one({"_id": NAME}))["throttle"] == {"batch_size": 20}
    resumed = await web.post(f"/migrations/{NAME}/control", data={"csrf": csrf, "action": "resume"})
    assert resumed.status_code == 303
    assert (await db["_mongoshift_background"].find_one({"_id": NAME}))["status"] == "pending"


async def test_a_body_that_is_no_readable_form_is_refused_with_the_dashboards_page(registered, counted_client, http, db) -> None:  # type: ignore[no-untyped-def]
    """A malformed multipart body (a script's, a scanner's) is the dashboard's own 400 page, with its headers: Starlette's
    answer was a bare "Invalid multipart data." without Cache-Control, CSP or X-Frame-Options."""
    client, _ = counted_client
    web = http(make_app(registered, client))
    bearer = {"authorization": f"Bearer {TOKEN}", "content-type": "multipart/form-data; boundary=x"}
    for path in (f"/migrations/{NAME}/control", f"/migrations/{NAME}/throttle", "/unlock", "/sign-in"):
        answer = await web.post(path, content=b"garbage", headers=bearer)
        assert answer.status_code == 400, path
        assert 'data-testid="error"' in answer.text and "form could not be read (Invalid multipart data.)" in answer.text
        assert answer.headers["cache-control"] == "no-store" and answer.headers["x-frame-options"] == "DENY"
        assert "content-security-policy" in answer.headers
    assert (await db["_mongoshift_background"].find_one({"_id": NAME}))["status"] == "pending"


async def test_a_bearer_token_steers_too_and_the_mounting_apps_identity_is_the_who(registered, counted_client, http, db) -> None:  # type: ignore[no-untyped-def]
    client, _ = counted_client
    web = http(make_app(registered, client))
    csrf = csrf_of((await web.get("/")).text)
    answer = await web.post(f"/migrations/{NAME}/control", data={"csrf": csrf, "action": "pause"}, headers={"authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 303
    named = http(make_app(registered, client, token=None, identity=lambda request: request.headers.get("x-user")))
    csrf = csrf_of((await named.get(f"/migrations/{NAME}")).text)
    anonymous = await named.post(f"/migrations/{NAME}/control", data={"csrf": csrf, "action": "resume"})
    assert anonymous.status_code == 403
    answer = await named.post(f"/migrations/{NAME}/control", data={"csrf": csrf, "action": "resume"}, headers={"x-user": "alice@example.com"})
    assert answer.status_code == 303
    history = (await db["_mongoshift_background"].find_one({"_id": NAME}))["history"]
    assert [(h["action"], h["by"]) for h in history[-2:]] == [("pause", "dashboard 127.0.0.1"), ("resume", "alice@example.com")]


async def test_an_identity_that_raises_names_no_operator_and_the_token_still_steers(registered, counted_client, http, db, caplog) -> None:  # type: ignore[no-untyped-def]
    """docs/dashboard.md's identity reads ``request.state.user``, which an anonymous request lacks: the control
    answered 500 with a traceback in the server's log. The application's code does not vouch: a 403, one warning."""
    client, _ = counted_client

    def identity(request):  # type: ignore[no-untyped-def]
        return request.state.user.email  # no user on this request: AttributeError, quoting nothing of it

    anonymous = http(make_app(registered, client, token=None, identity=identity))
    csrf = csrf_of((await anonymous.get(f"/migrations/{NAME}")).text)
    with caplog.at_level("WARNING", logger="mongoshift.dashboard"):
        refused = await anonymous.post(f"/migrations/{NAME}/control", data={"csrf": csrf, "action": "pause"})
    # the refusal names the sign-in this dashboard has: no token here (it said "the dashboard token (sign in)")
    assert refused.status_code == 403 and "controls need the mounting application&#39;s sign-in (this dashboard takes no token)" in refused.text
    assert [r.getMessage() for r in caplog.records if "identity" in r.getMessage()] == [
        "the mounting application's identity(request) raised AttributeError: it names no operator for this request"
    ]
    token_only = http(make_app(registered, client))  # as `mongoshift dashboard`: a token, nothing mounted
    csrf = csrf_of((await token_only.get(f"/migrations/{NAME}")).text)
    refused = await token_only.post(f"/migrations/{NAME}/control", data={"csrf": csrf, "action": "pause"})
    assert refused.status_code == 403 and "controls need the dashboard token: sign in with it" in refused.text
    assert "mounting application" not in refused.text
    with_token = http(make_app(registered, client, identity=identity))
    steered = await with_token.post(f"/migrations/{NAME}/control", data={"action": "pause"}, headers={"authorization": f"Bearer {TOKEN}"})
    assert steered.status_code == 303  # "None: you do not vouch for this request (the token may still)"
    assert (await db["_mongoshift_background"].find_one({"_id": NAME}))["status"] == "paused"


async def test_a_script_with_the_bearer_token_needs_no_csrf_value(registered, counted_client, http, db) -> None:  # type: ignore[no-untyped-def]
    """A script that sends the token as ``Authorization: Bearer`` and the form's fields, no page fetched
    first: it was refused (CSRF check), though the docs say a script sends that header."""
    client, _ = counted_client
    web = http(make_app(registered, client))
    wrong = await web.post(f"/migrations/{NAME}/control", data={"action": "pause"}, headers={"authorization": "Bearer not-the-token"})
    assert wrong.status_code == 403
    assert "that is not the dashboard token" in wrong.text and "CSRF" not in wrong.text  # not "reload the page": it has none
    # a mounting application's own Bearer (its sign-in) with this page's CSRF value: the refusal changed its words only
    named = http(make_app(registered, client, token=None, identity=lambda request: "app-user"))
    csrf = csrf_of((await named.get(f"/migrations/{NAME}")).text)
    steered = await named.post(f"/migrations/{NAME}/control", data={"csrf": csrf, "action": "pause"}, headers={"authorization": "Bearer app-jwt"})
    assert steered.status_code == 303, steered.text
    answer = await web.post(f"/migrations/{NAME}/control", data={"action": "pause"}, headers={"authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 303, answer.text
    assert (await db["_mongoshift_background"].find_one({"_id": NAME}))["status"] == "paused"
    forged = await web.post(
        f"/migrations/{NAME}/control", data={"action": "resume"}, headers={"authorization": f"Bearer {TOKEN}", "sec-fetch-site": "cross-site"}
    )
    assert forged.status_code == 403  # another site's request is refused all the same


async def test_read_only_shows_no_control_and_refuses_every_one(registered, counted_client, http, db) -> None:  # type: ignore[no-untyped-def]
    client, _ = counted_client
    web = http(make_app(registered, client, read_only=True))
    page = await web.get(f"/migrations/{NAME}")
    assert 'data-testid="controls"' not in page.text and "control-pause" not in page.text and 'data-testid="read-only"' in page.text
    csrf = csrf_of(page.text) if 'name="csrf"' in page.text else "x"
    refused = await web.post(f"/migrations/{NAME}/control", data={"csrf": csrf, "action": "pause"}, headers={"authorization": f"Bearer {TOKEN}"})
    assert refused.status_code == 403 and "read-only" in refused.text
    assert (await db["_mongoshift_background"].find_one({"_id": NAME}))["status"] == "pending"


async def test_links_and_forms_work_under_a_mount_prefix(registered, counted_client, http) -> None:  # type: ignore[no-untyped-def]
    client, _ = counted_client
    inner = make_app(registered, client)
    outer = Starlette(routes=[Mount("/ops/migrations", app=inner)])
    outer.state.dashboard = inner.state.dashboard
    web = http(outer)
    page = await web.get("/ops/migrations/")
    assert page.status_code == 200
    links = [link for link in re.findall(r'(?:href|src|action|sse-connect)="([^"]+)"', page.text) if link != "data:,"]  # the empty icon
    assert links and all("/ops/migrations/" in link for link in links), links
    assert f"/ops/migrations/migrations/{NAME}" in links
    assert not any(link.startswith(("http:", "https:", "//")) for link in links)  # paths: never the Host header's host
    spoofed = await web.get("/ops/migrations/", headers={"host": "evil.example"})
    assert "evil.example" not in spoofed.text
    assert (await web.get("/ops/migrations/static/htmx.min.js")).status_code == 200
    csrf = csrf_of(page.text)
    signed = await web.post("/ops/migrations/sign-in", data={"csrf": csrf, "token": TOKEN})
    assert signed.status_code == 303 and "path=/ops/migrations/" in signed.headers["set-cookie"].lower()
    assert signed.headers["location"] == "/ops/migrations/"
    unlocked = await web.post("/ops/migrations/unlock", data={"csrf": csrf, "confirm": "yes"})
    assert unlocked.status_code == 303 and unlocked.headers["location"].startswith("/ops/migrations/?")
    assert "unlock: nothing to clear" in (await web.get(unlocked.headers["location"])).text  # signed for the overview's path, prefix and all


async def test_a_signature_or_a_holder_cookie_that_is_not_ascii_is_refused_not_a_server_error(registered, counted_client, http, db) -> None:  # type: ignore[no-untyped-def]
    """A crafted link's ``sig`` (``?said=x&sig=%C3%A9``) or a browser's holder cookie with a non-ASCII character made
    every page a 500 with a traceback in the log (``hmac.compare_digest`` refuses non-ASCII text): it matches nothing."""
    client, _ = counted_client
    web = http(make_app(registered, client))
    crafted = await web.get(f"/migrations/{NAME}?said=call+this+number&sig=%C3%A9")
    assert crafted.status_code == 200 and "call this number" not in crafted.text
    cookie = {"cookie": "mongoshift_holder=\u00e9t\u00e9".encode()}  # as a browser sends it: UTF-8 bytes, read as latin-1
    page = await web.get("/", headers=cookie)
    assert page.status_code == 200 and "Sign in" in page.text  # not taken for a token holder
    csrf = csrf_of(page.text)
    refused = await web.post(f"/migrations/{NAME}/control", data={"csrf": csrf, "action": "pause"}, headers=cookie)
    assert refused.status_code == 403 and "token" in refused.text
    assert (await db["_mongoshift_background"].find_one({"_id": NAME}))["status"] == "pending"


async def test_an_unknown_page_is_titled_not_found_and_a_registration_is_shown_without_a_previous_state(registered, counted_client, http) -> None:  # type: ignore[no-untyped-def]
    client, _ = counted_client
    web = http(make_app(registered, client))
    missing = await web.get("/migrations/0009_nope")
    assert missing.status_code == 404 and "<title>Not found · mongoshift dashboard</title>" in missing.text
    page = await web.get(f"/migrations/{NAME}")
    # the registration's history row has no previous state: it shows the state it began in, and no "None"
    assert re.search(r"<td>register</td><td>pending</td>", page.text) and "None" not in page.text


async def test_a_failure_shows_its_error_without_document_values_and_ids_only_to_a_holder_who_asks(project, db, counted_client, http) -> None:  # type: ignore[no-untyped-def]
    project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.2)
    await seed(db.people, 20)
    await db.people.create_index("email", unique=True, sparse=True)
    failing = background_file(batch_size=5, extra="adaptive=False, max_document_errors=0,").replace(
        'doc["full_name"] =', 'doc["email"] = "secret-value@example.com"\n    doc["full_name"] ='
    )
    project.add(NAME, failing)
    await command.up(project.settings())
    async with connect(project.settings()) as ms:
        (failed,) = await ms.background.run([NAME])
    assert failed.status == "failed"
    client, _ = counted_client
    web = http(make_app(project, client))
    page = await web.get(f"/migrations/{NAME}")
    assert 'data-testid="status">failed' in page.text and "max_document_errors" in page.text
    assert 'data-testid="doc-errors"' in page.text and "11000" in page.text
    # the history's reason for the failure: the last error cut at a word, and saying so (it ended "counts t")
    why = re.search(r"<td>fail</td><td>running → failed</td><td>[^<]*</td><td>([^<]*)</td>", page.text)
    assert why, "the failure's history entry"
    reason = html.unescape(why.group(1))
    assert reason.endswith("…") and len(reason) <= 200 and failed.last_error, reason
    assert failed.last_error.startswith(reason.removesuffix("…")) and failed.last_error[len(reason) - 1] in " ;,", reason
    assert "secret-value" not in page.text and "F1 L1" not in page.text
    csrf = csrf_of(page.text)
    assert (await web.post(f"/migrations/{NAME}/failed-ids", data={"csrf": csrf})).status_code == 403
    await sign_in(web)
    shown = await web.post(f"/migrations/{NAME}/failed-ids", data={"csrf": csrf})
    assert shown.status_code == 200 and 'data-testid="ids"' in shown.text
    assert re.search(r"<code>\d+</code>", shown.text)
    assert 'data-testid="ids"' not in (await web.get(f"/migrations/{NAME}")).text
    # a name no migration is registered under: 404, as its page answers (it was 409, a conflict)
    assert (await web.post("/migrations/0009_typo.py/failed-ids", data={"csrf": csrf})).status_code == 404
    assert (await web.get("/migrations/0009_typo.py")).status_code == 404


@pytest.mark.parametrize(("host", "loopback"), [("127.0.0.1", True), ("localhost", True), ("::1", True), ("0.0.0.0", False), ("10.1.2.3", False)])
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_the_cli_refuses_a_public_address_without_a_token_and_a_short_token(fast_project, cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("MONGOSHIFT_DASHBOARD_TOKEN", raising=False)
    refused = cli(fast_project, "dashboard", "--host", "0.0.0.0", "--json")
    assert refused.returncode == 52 and "MONGOSHIFT_DASHBOARD_TOKEN" in refused.stdout
    assert "***" not in refused.stdout  # the advice reads whole: no word of it taken for a secret
    monkeypatch.setenv("MONGOSHIFT_DASHBOARD_TOKEN", "short")
    short = cli(fast_project, "dashboard", "--json")
    assert short.returncode == 52 and "short" not in short.stdout.replace("short_token", "")


def test_the_cli_serves_on_loopback_and_prints_a_generated_token_once(fast_project) -> None:  # type: ignore[no-untyped-def]
    """``mongoshift dashboard --port 0``: the address, then the token, on the terminal only; the token steers; a stop with a page open ends its stream."""
    import httpx

    from ..conftest import start_cli

    process = start_cli(fast_project, "dashboard", "--port", "0")
    try:
        assert process.stderr is not None
        first = process.stderr.readline()
        assert first.startswith("mongoshift dashboard on http://127.0.0.1:"), first
        url = first.split(" on ", 1)[1].split()[0]
        second = process.stderr.readline()
        assert second.startswith("controls token (this run only, printed once): ")
        token = second.rsplit(" ", 1)[1].strip()
        assert len(token) >= 16
        with httpx.Client(base_url=url, timeout=60) as web:
            page = web.get("/")
            assert page.status_code == 200 and token not in page.text
            refused = web.post("/sign-in", data={"csrf": "x", "token": token})
            assert refused.status_code == 403  # no CSRF value of this browser
            csrf = csrf_of(page.text) if 'name="csrf"' in page.text else None
            assert csrf is not None
            signed = web.post("/sign-in", data={"csrf": csrf, "token": token})
            assert signed.status_code == 303
            # an open page at Ctrl-C (SIGTERM here): its stream ends as the shutdown starts, nothing is cancelled
            with web.stream("GET", "/events") as stream:
                chunks = stream.iter_text()
                assert next(chunks).startswith("event: update\n")
                process.terminate()
                assert all(chunk.startswith("event: update\n") for chunk in chunks)  # the response ended, no reset
    finally:
        process.terminate()
        _, rest = process.communicate(timeout=60)
    assert token not in rest  # printed once
    assert "graceful shutdown exceeded" not in rest and "Traceback" not in rest, rest


LOGS_AT_LEVELS = """
async def up(ctx):
    ctx.log.info("starting the copy")
    ctx.log.debug("a detail")
    ctx.log.warning("slow batch <b>not markup</b>")
    ctx.log.error("one row skipped")
"""

QUIET = """
async def up(ctx):
    pass
"""


async def test_a_runs_page_shows_its_log_lines_in_order_with_their_level(project, counted_client, http) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_logs.py", LOGS_AT_LEVELS)
    report = await command.up(project.settings())
    project.add("0002_quiet.py", QUIET)
    quiet = await command.up(project.settings())
    client, _ = counted_client
    web = http(make_app(project, client))
    overview = await web.get("/")
    assert f'href="/runs/{report.run_id}" data-testid="run-link"' in overview.text  # linked from the last runs
    page = await web.get(f"/runs/{report.run_id}")
    assert page.status_code == 200 and page.headers["cache-control"] == "no-store"
    rows = re.findall(r'<tr data-seq="(\d+)">.*?data-testid="level">(\w+)</span></td>\s*<td class="message">([^<]*(?:&lt;[^<]*)*)</td>', page.text, re.S)
    assert [(int(seq), level) for seq, level, _ in rows] == [(1, "info"), (2, "debug"), (3, "warning"), (4, "error")]
    assert [message for _, _, message in rows] == ["starting the copy", "a detail", "slow batch &lt;b&gt;not markup&lt;/b&gt;", "one row skipped"]
    assert "0001_logs.py" in page.text
    # Its lines are read when requested, with or without JavaScript: the pages' "Live updates need JavaScript" is not said.
    assert "Live updates" not in page.text and "Live updates need JavaScript" in overview.text
    silent = await web.get(f"/runs/{quiet.run_id}")  # a known run that logged nothing: its page says so
    assert silent.status_code == 200 and 'data-testid="no-lines"' in silent.text and "0002_quiet.py" in silent.text


async def test_a_page_for_an_unknown_run_is_a_clean_404(registered, counted_client, http) -> None:  # type: ignore[no-untyped-def]
    client, _ = counted_client
    web = http(make_app(registered, client))
    for run_id in ("no-such-run", "x" * 300):
        page = await web.get(f"/runs/{run_id}")
        assert page.status_code == 404 and 'data-testid="error"' in page.text and "no run with this id" in page.text
        assert "Live updates" not in page.text
        assert page.headers["cache-control"] == "no-store"


async def test_a_migration_page_shows_drift_found_after_completion_and_its_collections_watcher(registered, counted_client, http, db) -> None:  # type: ignore[no-untyped-def]
    client, _ = counted_client
    async with connect(registered.settings()) as ms:
        (done,) = await ms.background.run([NAME])
    assert done.status == "completed"
    page_path = f"/migrations/{NAME.removesuffix('.py')}"
    clean = await http(make_app(registered, client)).get(page_path)
    assert 'data-testid="no-drift"' in clean.text and "Live watcher of people: none" in clean.text
    # Written by an old release after the migration completed: the old shape again.
    await db.people.insert_many([{"_id": 1000 + i, "first": "Zelda-secret", "last": "Q", "__v": 1, "__rev": 1} for i in range(3)])
    await db["_mongoshift_background_watch"].insert_one(
        {"_id": "people", "fence": "f", "state": "streaming", "guards": [NAME], "counters": {"upgraded": 7}, "updated_at": datetime.now(UTC)}
    )
    page = await http(make_app(registered, client)).get(page_path)
    section = page.text[page.text.index('data-testid="drift"'):page.text.index("<h2>Partitions</h2>")]
    assert "background.drift" in section and 'data-testid="no-drift"' not in section
    assert 'data-testid="watcher-state">streaming</b>' in section and "upgraded 7" in section
    assert "Zelda-secret" not in page.text  # counts and names only, no document value


async def test_requests_arriving_together_at_first_share_one_session(registered) -> None:  # type: ignore[no-untyped-def]
    """The first requests may arrive together: they wait for one session (two would leave one open after ``aclose``)."""
    import asyncio

    app = make_app(registered, None)  # the dashboard opens its own client
    dashboard = app.state.dashboard
    try:
        first, *others = await asyncio.gather(*(dashboard.poller() for _ in range(3)))
        assert all(other is first for other in others)
        opened, *also = await asyncio.gather(first.refresh(), *(dashboard.session() for _ in range(3)))  # the poll opens it too
        assert opened.error is None and all(ms is first.ms for ms in also) and first.ms is not None
    finally:
        await dashboard.aclose()
    assert dashboard._client is None  # the client it opened is closed and forgotten: a later request opens a new one


async def test_the_event_stream_of_an_unknown_migration_is_a_404_as_its_page(registered, counted_client, http) -> None:  # type: ignore[no-untyped-def]
    """It streamed empty updates for ever; a browser's EventSource stops at a 404, and a known name still streams."""
    client, _ = counted_client
    app = make_app(registered, client)
    web = http(app)
    statuses: list[int] = []
    await first_events(app, "/events?name=0009_nope", statuses=statuses)
    assert statuses == [404]
    missing = await web.get("/events?name=0009_nope")  # a whole response now: read as the page
    assert missing.status_code == 404 and "0009_nope.py is not a registered background migration" in missing.text
    (detail,) = await first_events(app, f"/events?name={NAME.removesuffix('.py')}")
    assert detail.startswith("event: update\n") and 'data-testid="status">pending' in detail


def test_create_app_refuses_arguments_it_cannot_use_with_exit_6() -> None:
    """They were taken as given: a poll of 0, a negative one or NaN read the project without a pause, ``read_only="no"``
    was read for its truth, a text as ``identity`` named nobody, and a client or token of another type failed later."""
    from mongoshift import api
    from mongoshift.dashboard import create_app
    from mongoshift.errors import ConfigInvalidError, ExitCode

    settings = api.load_settings({"uri": "mongodb://127.0.0.1:1", "db": "app"})
    for options, says in (
        ({"poll_seconds": 0}, "poll_seconds must be a number of seconds above 0, not 0"),
        ({"poll_seconds": -1}, "poll_seconds must be a number of seconds above 0"),
        ({"poll_seconds": float("nan")}, "poll_seconds must be a number of seconds above 0, not nan"),
        ({"poll_seconds": "1"}, "poll_seconds must be a number of seconds above 0"),
        ({"read_only": "no"}, "read_only must be True or False, not str"),
        ({"identity": "admin"}, "identity must be a function of the request (or None), not str"),
        ({"token": 12345678901234567890}, "token must be a text (or None), not int"),
        ({"client": "mongodb://127.0.0.1:1"}, "client must be a pymongo AsyncMongoClient (or None), not str"),
    ):
        with pytest.raises(ConfigInvalidError) as refused:
            create_app(settings, **options)  # type: ignore[arg-type]
        assert says in refused.value.message and refused.value.exit_code == ExitCode.CONFIG_INVALID
        assert "12345678901234567890" not in refused.value.message  # a token is never shown
    assert create_app(settings, poll_seconds=2, read_only=True).state.dashboard.options.poll_seconds == 2.0


async def test_a_path_or_method_the_dashboard_has_no_route_for_is_its_own_page_with_its_headers(registered, counted_client, http) -> None:  # type: ignore[no-untyped-def]
    """An unknown path, a name holding a ``/``, a missing static file and a GET of a control's address were Starlette's
    bare "Not Found" / "Method Not Allowed" texts, without Cache-Control, CSP or X-Frame-Options."""
    client, _ = counted_client
    web = http(make_app(registered, client))
    for path, status in (
        ("/nowhere", 404), ("/favicon.ico", 404), ("/migrations/a%2Fb", 404), ("/static/none.js", 404),
        (f"/migrations/{NAME}/control", 405), ("/unlock", 405), ("/sign-in", 405),
    ):
        answer = await web.get(path)
        assert answer.status_code == status, path
        assert 'data-testid="error"' in answer.text and "Back to the overview" in answer.text, path
        assert answer.headers["cache-control"] == "no-store" and answer.headers["x-frame-options"] == "DENY", path
        assert "content-security-policy" in answer.headers, path
    not_allowed = await web.delete("/")
    assert not_allowed.status_code == 405 and set(not_allowed.headers["allow"].split(", ")) == {"GET", "HEAD"}
    assert "DELETE is not allowed here" in not_allowed.text
    # a static file that exists is still served as it is
    assert (await web.get("/static/dashboard.css")).status_code == 200


async def test_a_reason_is_recorded_whole_or_refused_as_the_clis_never_cut(registered, counted_client, http, db) -> None:  # type: ignore[no-untyped-def]
    """A reason over 200 characters was cut to 200 without a word (the form's limit, and the server's), where the CLI
    takes 512 and refuses a longer one: a reason is never cut (docs/background.md)."""
    client, _ = counted_client
    web = http(make_app(registered, client))
    bearer = {"authorization": f"Bearer {TOKEN}"}
    page = await web.get(f"/migrations/{NAME}")
    assert 'maxlength="512"' in page.text and 'maxlength="200"' not in page.text
    long = "why " * 100  # 400 characters
    answer = await web.post(f"/migrations/{NAME}/control", data={"action": "pause", "reason": long}, headers=bearer)
    assert answer.status_code == 303
    history = (await db["_mongoshift_background"].find_one({"_id": NAME}))["history"]
    assert history[-1]["action"] == "pause" and history[-1]["reason"] == long.strip()
    for path, data in ((f"/migrations/{NAME}/control", {"action": "resume"}), (f"/migrations/{NAME}/throttle", {"batch_size": "7"})):
        refused = await web.post(path, data={**data, "reason": "x" * 513}, headers=bearer, follow_redirects=True)
        assert "refused (exit 6)" in refused.text and "513 characters long: at most 512" in refused.text, path
    state = await db["_mongoshift_background"].find_one({"_id": NAME})
    assert state["status"] == "paused" and not state.get("throttle") and len(state["history"]) == len(history)


async def test_counts_are_grouped_by_thousands_as_the_rest_of_the_output(fast_project, db, counted_client, http) -> None:  # type: ignore[no-untyped-def]
    """The pages showed ``2393 of ~5000`` beside ``1,234 failed documents`` (``plural`` groups them, as the CLI does
    everywhere): every count and rate is now grouped by thousands."""
    await seed(db.people, 1_500)
    fast_project.add(NAME, background_file(batch_size=500, extra="adaptive=False,"))
    await command.up(fast_project.settings())
    async with connect(fast_project.settings()) as ms:
        await ms.background.run([NAME])
    client, _ = counted_client
    web = http(make_app(fast_project, client))
    overview = (await web.get("/")).text
    assert 'data-testid="done">1,500</span> of 1,500' in overview  # completed: what it scanned, exact
    page = (await web.get(f"/migrations/{NAME}")).text
    assert 'data-testid="done">1,500</span> of 1,500 · ' in page and 'data-testid="migrated">1,500</span> migrated, 1,500 scanned' in page
    assert re.search(r"<td>1,500 / ~1,500</td>", page)  # the partition's progress
    assert not re.search(r"\b\d{4,}\b(?![:-])", re.sub(r"<[^>]*>|\d{4}-\d\d-\d\d[ T][\d:.]+|[0-9a-f]{32}", " ", page)), "an ungrouped number"


async def test_signing_in_goes_back_to_the_page_it_was_given_on_and_nowhere_else(registered, counted_client, http) -> None:  # type: ignore[no-untyped-def]
    """Signing in from a migration's page (where its controls are) landed on the overview; it goes back to that page
    now, and a ``next`` that is not a path of this dashboard (another host, another mount) still lands on the overview."""
    client, _ = counted_client
    inner = make_app(registered, client)
    outer = Starlette(routes=[Mount("/ops/migrations", app=inner)])
    outer.state.dashboard = inner.state.dashboard
    web = http(outer)
    page = (await web.get(f"/ops/migrations/migrations/{NAME}")).text
    assert f'name="next" value="/ops/migrations/migrations/{NAME}"' in page
    csrf = csrf_of(page)
    for given, lands in (
        (f"/ops/migrations/migrations/{NAME}", f"/ops/migrations/migrations/{NAME}"),
        ("//evil.example/ops/migrations/", "/ops/migrations/"),
        ("https://evil.example/ops/migrations/", "/ops/migrations/"),
        ("/elsewhere/", "/ops/migrations/"),
        ("/ops/migrations/\\evil", "/ops/migrations/"),
        ("", "/ops/migrations/"),
    ):
        signed = await web.post("/ops/migrations/sign-in", data={"csrf": csrf, "token": TOKEN, "next": given})
        assert signed.status_code == 303 and signed.headers["location"] == lands, given


async def test_the_throttle_in_force_reads_as_the_clis(registered, counted_client, http) -> None:  # type: ignore[no-untyped-def]
    """The page said ``throttled: batch size 2000, pause ms 1500`` (the field names with spaces); the CLI's words are
    ``batch size 2,000, pause 1,500 ms``."""
    async with connect(registered.settings()) as ms:
        await ms.background.throttle(NAME, batch_size=2_000, pause_ms=1_500)
    client, _ = counted_client
    page = (await http(make_app(registered, client)).get(f"/migrations/{NAME}")).text
    assert 'data-testid="throttle">throttled: batch size 2,000, pause 1,500 ms</b>' in page
    # a fixed size does not start anywhere (it read "Batches: fixed, starting at 50")
    assert "<p>Batches: fixed at 50; " in page and "starting at" not in page


async def test_progress_after_a_retry_counts_this_pass_as_the_cli_does(registered, db, counted_client, http) -> None:  # type: ignore[no-untyped-def]
    """The overview showed the documents migrated in every pass of the estimate of this one: after a retry of a
    completed migration whose second pass failed, ``300 of ~40`` beside a bar that counted this pass. It shows this pass's progress now,
    as ``background status`` prints it (documents done of the pass's estimate), and the migration's page both."""
    async with connect(registered.settings()) as ms:
        (first,) = await ms.background.run([NAME])
        assert first.status == "completed"
        # 40 documents written since at the source version, which the transform cannot migrate (a number as "first")
        await db.people.insert_many([{"_id": 1_000 + i, "first": i, "last": "x", "__v": 1, "__rev": 1} for i in range(40)])
        await ms.background.control(NAME, "retry")
        (second,) = await ms.background.run([NAME])
    assert second.status == "failed" and second.pass_number == 2 and second.totals["migrated"] == 300
    done = second.estimate - second.remaining  # the pass's documents done, as `background status` counts them
    assert second.estimate == 40 and done <= 40
    client, _ = counted_client
    web = http(make_app(registered, client))
    overview = (await web.get("/")).text
    assert f'data-testid="done">{done}</span> of ~40</td>' in overview
    assert f'<progress max="100" value="{round(100 * done / 40)}" aria-label="progress of {NAME}">' in overview
    assert "300</span> of ~40" not in overview
    page = (await web.get(f"/migrations/{NAME}")).text
    assert f'data-testid="done">{done}</span> of ~40 in pass 2' in page
    assert f'data-testid="migrated">300</span> migrated, {second.totals['scanned']:,} scanned in all passes' in page


async def test_times_are_shown_in_utc_from_an_applications_client_of_another_zone(registered, mongo_uri, http) -> None:  # type: ignore[no-untyped-def]
    """A mounting application's client made with ``tz_aware=True, tzinfo=...`` reads every stored time in its zone:
    the pages showed those local times beside "Read at ... UTC" (and a run's "At (UTC)" column). They are UTC now."""
    from zoneinfo import ZoneInfo

    from pymongo import AsyncMongoClient

    async with connect(registered.settings()) as ms:
        await ms.background.control(NAME, "pause", reason="zone test")
        (row,) = [r for r in await ms.status() if r.name == NAME]
        (report,) = await ms.background.status(NAME)
    applied = row.applied_at.astimezone(UTC) if row.applied_at.tzinfo else row.applied_at
    paused = report.history[-1]["at"]
    paused = paused.astimezone(UTC) if paused.tzinfo else paused
    tokyo: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(mongo_uri, tz_aware=True, tzinfo=ZoneInfo("Asia/Tokyo"))
    try:
        web = http(make_app(registered, tokyo))
        overview = (await web.get("/")).text
        assert f"<td>{applied:%Y-%m-%d %H:%M:%S}</td>" in overview, "the applied time in UTC"
        assert f"{applied + timedelta(hours=9):%Y-%m-%d %H:%M:%S}" not in overview
        page = (await web.get(f"/migrations/{NAME}")).text
        assert f"<td>{paused:%Y-%m-%d %H:%M:%S}</td><td>pause</td>" in page, "the history's time in UTC"
        # and each table of times says so, as the run's page did ("At (UTC)"): the overview's and the history's did not
        assert "<th>At (UTC)</th><th>Run</th>" in overview and "<th>At (UTC)</th><th>Action</th>" in page
    finally:
        await tokyo.close()


async def test_the_ids_of_failed_documents_say_their_type(project, db, counted_client, http) -> None:  # type: ignore[no-untyped-def]
    """Legacy data with mixed ``_id`` types: the ids were shown with ``str``, so the number 5 and the text "5" both read
    ``5`` and a date ``2020-02-12 00:00:00``, which no filter finds. They are relaxed Extended JSON now."""
    from bson import ObjectId

    project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.2)
    oid = ObjectId()
    ids = [5, "5", datetime(2020, 2, 12), oid]
    await db.people.insert_many([{"_id": i, "first": 1, "last": "x", "__v": 1, "__rev": 1} for i in ids])  # a number as "first": fails
    project.add(NAME, background_file(batch_size=10, extra="adaptive=False, max_document_errors=10,"))
    await command.up(project.settings())
    async with connect(project.settings()) as ms:
        (done,) = await ms.background.run([NAME])
    assert done.failed_documents == 4
    client, _ = counted_client
    web = http(make_app(project, client))
    csrf = await sign_in(web)
    shown = (await web.post(f"/migrations/{NAME}/failed-ids", data={"csrf": csrf})).text
    listed = re.findall(r"<li><code>(.*?)</code></li>", shown)
    assert sorted(listed) == sorted(
        ["5", "&#34;5&#34;", "{&#34;$date&#34;: &#34;2020-02-12T00:00:00Z&#34;}", f"{{&#34;$oid&#34;: &#34;{oid}&#34;}}"]
    ), listed


async def test_each_controls_fields_are_named_for_a_screen_reader(registered, counted_client, http) -> None:  # type: ignore[no-untyped-def]
    """Seven "why (optional)" fields and three "sure" boxes, named only by a placeholder or that one word: a screen
    reader going from field to field could not tell which control each belonged to. Each is named for its control."""
    client, _ = counted_client
    page = (await http(make_app(registered, client)).get(f"/migrations/{NAME}")).text
    forms = re.findall(r"<form method=\"post\" action=\"[^\"]*/(?:control|throttle)\">(.*?)</form>", page, re.DOTALL)
    reasons = [re.search(r'<input type="text" name="reason"[^>]*aria-label="([^"]+)"', form) for form in forms]
    assert all(reasons) and len(forms) == 7
    names = [m.group(1) for m in reasons if m]
    assert names == ["why pause (optional)", "why resume (optional)", "why cancel (optional)", "why retry (optional)",
                     "why retry from start (optional)", "why unlock (optional)", "why throttle (optional)"]
    sure = re.findall(r'name="confirm" value="yes" required aria-label="([^"]+)"', page)
    assert sure == ["sure: cancel", "sure: retry from start", "sure: unlock"]


async def test_a_stale_lock_says_why_beside_its_holder(registered, db, counted_client, http) -> None:  # type: ignore[no-untyped-def]
    """The overview showed a stale lock as ``held by ci on HOST since ... warn``: a badge, with nothing to say what it
    warned of (a lease run out, a holder gone), which is what decides an unlock. The audit's words are shown now."""
    import socket

    now = datetime.now(UTC)
    await db["_mongoshift_locks"].insert_one(
        {"_id": "migration_lock", "owner": "run-1", "nonce": "n", "host": socket.gethostname(), "pid": 4242,
         "executed_by": "ci", "ttl_ms": 60_000, "locked_at": now - timedelta(minutes=5), "expires_at": now - timedelta(minutes=4)}
    )
    client, _ = counted_client
    overview = (await http(make_app(registered, client)).get("/")).text
    found = re.search(r'<ul data-testid="lock-findings"><li>(.*?)</li>', overview)
    assert found, "the lock's audit finding"
    shown = html.unescape(re.sub(r"<[^>]+>", "", found.group(1)))
    assert shown.startswith("warn the migration lock of ci on ") and "'mongoshift unlock --yes' clears it" in shown
    assert 'data-testid="unlock"' in overview


async def test_a_failed_file_says_why_on_the_overview_with_its_values_masked(project, counted_client, http) -> None:  # type: ignore[no-untyped-def]
    """The overview named a failed file and linked its run's log, which holds its ``ctx.log`` lines only: why it failed
    was on no page. Its recorded error (what ``status --json`` gives, a value quoted by Python masked) is beside it."""
    project.add("0001_a.py", "def up(ctx):\n    ctx.log.info('starting')\n    int('secret-value-123')\n")
    with pytest.raises(Exception, match=r"0001_a\.py"):
        await command.up(project.settings())
    client, _ = counted_client
    overview = (await http(make_app(project, client)).get("/")).text
    failed = re.search(r'<p class="error" data-testid="failed-files">(.*?)</p>', overview)
    assert failed, "the failed files"
    shown = html.unescape(re.sub(r"<[^>]+>", "", failed.group(1)))
    assert shown.startswith("Failed files: 0001_a.py (ValueError: invalid literal for int() with base 10: ") and "(its run's log)" in shown
    assert "secret-value" not in overview
    run = re.search(r'href="(/runs/[0-9a-f]+)">its run.s log</a>', failed.group(1))
    assert run, "the link to the failed run's log"
    page = (await http(make_app(project, client)).get(run.group(1))).text
    assert 'data-testid="file-error">(ValueError: invalid literal for int() with base 10: ' in page and "secret-value" not in page
