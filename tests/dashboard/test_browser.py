"""The dashboard in a real browser: headless Chromium (the system's, driven by Playwright), against a served app.

Marked ``browser``: in the default run, skipped with the reason when Chromium or Playwright is missing
(``.ci/run`` installs Chromium). Every wait is on a state (a text on the page, a record in the
database), bounded by Playwright's own timeout; what has none (opening and closing pages, the context,
the browser, Playwright, the server's start and shutdown) by ``bounded``, which fails saying where the
loop's tasks wait, never a silent hang. Screenshots go to ``MONGOSHIFT_SCREENSHOTS`` when
set (docs/dashboard.md's are made so), else beside the run's temporary files.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mongoshift.api import connect, migrations as command

from ..background.conftest import background_file, seed
from .conftest import NAME, TOKEN, WAIT_S, bounded, served, tenants_at_each_state

# pytest-timeout's default (signal) method raises its failure in whatever Python code the main thread runs
# when the alarm comes: with the event loop busy (a loaded machine: Playwright's pipe, uvicorn, the poller),
# that is often a loop callback, and asyncio logs and drops it, so a hang went on past the timeout with no
# traceback. The thread method ends the process after dumping every thread's stack: a hang always ends,
# as a failure naming the test (under xdist, its worker "crashed while running" it).
pytestmark = [
    pytest.mark.browser,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.timeout(method="thread"),
]

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"]
#: Playwright's bound on each wait for a state (the machine may be loaded; nothing here sleeps).
WAIT_MS = int(WAIT_S * 1000)


@pytest.fixture
async def chromium() -> AsyncIterator[Any]:
    try:
        from playwright.async_api import async_playwright
    except ImportError as exc:  # pragma: no cover - the test extra installs it
        pytest.skip(f"browser tests skipped: Playwright is not installed ({exc.name})")
    if shutil.which(CHROMIUM) is None:
        pytest.skip(f"browser tests skipped: no Chromium at {CHROMIUM} (install Debian's chromium package; .ci/run does)")
    playwright = async_playwright()
    p = await bounded(playwright.__aenter__(), "starting Playwright")
    try:
        b = await p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, timeout=WAIT_MS)
        try:
            yield b
        finally:
            await bounded(b.close(), "closing Chromium")
    finally:
        await bounded(playwright.__aexit__(None, None, None), "stopping Playwright")


@pytest.fixture
async def browser(chromium: Any) -> AsyncIterator[Any]:
    """A fresh browser context (its own cookies); each test closes its pages before its server stops."""
    context = await bounded(chromium.new_context(), "opening a browser context")
    # every Playwright wait given no timeout of its own (a goto, a click, set_content) has the tests' bound,
    # not Playwright's 30 s default
    context.set_default_timeout(WAIT_MS)
    try:
        yield context
    finally:
        await bounded(context.close(), "closing the browser context")


@pytest.fixture
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("MONGOSHIFT_SCREENSHOTS")
    path = Path(where) if where else tmp_path_factory.getbasetemp() / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


async def _done(page: Any) -> int:
    return int((await page.locator('[data-testid="done"]').first.inner_text()).replace(",", ""))  # grouped: 1,500


async def test_progress_advances_live_and_pause_resume_steer_the_runner(fast_project, db, browser, shots) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 3_000)
    fast_project.add(NAME, background_file(batch_size=25, extra="adaptive=False,").replace("pause_ms=0", "pause_ms=40"))
    s = fast_project.settings()
    await command.up(s)
    states = db["_mongoshift_background"]
    async with connect(s) as ms, served(fast_project) as dash:
        runner = await ms.background.start_runner()
        page = await bounded(browser.new_page(), "opening a page")
        await page.goto(dash.url + "/")
        await page.evaluate("window.notReloaded = true")
        await page.locator('tr[data-name="0001_names.py"] [data-testid="status"]').filter(has_text="running").wait_for(timeout=WAIT_MS)
        first = await _done(page)
        # the count grows on the same page (no reload: the marker survives), from the event stream
        from playwright.async_api import expect

        await expect(page.locator('[data-testid="done"]').first).not_to_have_text(f"{first:,}", timeout=WAIT_MS)
        assert await _done(page) > first
        assert await page.evaluate("window.notReloaded") is True
        await page.screenshot(path=str(shots / "overview.png"), full_page=True)
        # sign in, then pause from the migration's page
        await page.fill('input[name="token"]', TOKEN)
        await page.click('button:has-text("Sign in")')
        await page.locator('[data-testid="signed-in"]').wait_for(timeout=WAIT_MS)
        await page.goto(f"{dash.url}/migrations/{NAME}")
        await page.click('[data-testid="control-pause"]')
        await page.locator('[data-testid="said"]').filter(has_text="pause: done").wait_for(timeout=WAIT_MS)
        assert (await states.find_one({"_id": NAME}))["status"] == "paused"
        await page.locator('#live [data-testid="status"]').filter(has_text="paused").wait_for(timeout=WAIT_MS)
        await page.screenshot(path=str(shots / "migration-paused.png"), full_page=True)
        await page.click('[data-testid="control-resume"]')
        await page.locator('[data-testid="said"]').filter(has_text="resume: done").wait_for(timeout=WAIT_MS)
        assert (await states.find_one({"_id": NAME}))["status"] in ("pending", "running", "completed")
        # the runner takes it up again and finishes it; the page follows without a reload
        await page.locator('#live [data-testid="status"]').filter(has_text="completed").wait_for(timeout=WAIT_MS * 3)
        assert await db.people.count_documents({"__v": 2}) == 3_000
        history = (await states.find_one({"_id": NAME}))["history"]
        assert [h["by"] for h in history if h["action"] in ("pause", "resume")] == ["dashboard 127.0.0.1"] * 2
        await page.screenshot(path=str(shots / "migration-completed.png"), full_page=True)
        await bounded(page.close(), "closing the page")
        await runner.stop()


async def test_a_page_says_when_its_live_stream_is_lost_and_when_it_is_back(registered, browser) -> None:  # type: ignore[no-untyped-def]
    """A dashboard that stopped (or a network that dropped) left the page showing its last state as if live, with
    nothing to say that no update came any more; it now says so until the stream is open again."""
    dash = served(registered)
    async with dash:
        page = await bounded(browser.new_page(), "opening a page")
        await page.goto(f"{dash.url}/migrations/{NAME}")
        await page.locator('body[data-live="open"]').wait_for(timeout=WAIT_MS)
        lost = page.locator('[data-testid="stream-lost"]')
        assert not await lost.is_visible()
        port = dash.sock.getsockname()[1]
    await lost.wait_for(state="visible", timeout=WAIT_MS)
    assert "cannot be reached" in await lost.inner_text()
    async with served(registered, port=port):  # a dashboard again at the same address: the page's stream opens again
        await lost.wait_for(state="hidden", timeout=WAIT_MS)
        await page.locator('body[data-live="open"]').wait_for(timeout=WAIT_MS)
        await bounded(page.close(), "closing the page")


async def test_keyboard_focus_on_a_link_stays_there_across_live_updates(registered, browser) -> None:  # type: ignore[no-untyped-def]
    """The overview's live part is replaced at every poll: a keyboard user who tabbed to a migration's link (or a run's)
    lost the focus to the page's start about once a second. htmx gives it back to the element of the same id, which
    the links had none of; they have one now."""
    async with served(registered) as dash:
        page = await bounded(browser.new_page(), "opening a page")
        await page.goto(dash.url + "/")
        await page.locator('body[data-live="open"]').wait_for(timeout=WAIT_MS)
        for link in (f'#live a[href="/migrations/{NAME}"]', '#live [data-testid="run-link"]'):
            await page.locator(link).focus()
            await page.evaluate("document.querySelector('#live .at').setAttribute('data-replaced', 'no')")
            await page.locator("#live .at:not([data-replaced])").wait_for(timeout=WAIT_MS)  # the next update swapped the part
            focused = await page.evaluate("(sel) => document.activeElement.matches(sel)", link)
            assert focused, f"the focus left {link} at a live update"
        await bounded(page.close(), "closing the page")


async def test_a_page_whose_migration_is_gone_says_so_not_that_the_dashboard_cannot_be_reached(registered, db, browser) -> None:  # type: ignore[no-untyped-def]
    """A migration whose state went while its page was open left the live part empty; and when the stream came back
    to a 404, the page said the dashboard could not be reached, though it answered."""
    dash = served(registered)
    async with dash:
        page = await bounded(browser.new_page(), "opening a page")
        await page.goto(f"{dash.url}/migrations/{NAME}")
        await page.locator('body[data-live="open"]').wait_for(timeout=WAIT_MS)
        await bounded(db["_mongoshift_background"].delete_one({"_id": NAME}), "removing the migration's state")
        await page.locator('#live [data-testid="not-registered"]').wait_for(timeout=WAIT_MS)
        port = dash.sock.getsockname()[1]
    async with served(registered, port=port):  # the page's stream comes back to this name's 404
        await page.locator('body[data-live="gone"]').wait_for(timeout=WAIT_MS)
        assert NAME in await page.locator('[data-testid="stream-gone"]').inner_text()
        assert not await page.locator('[data-testid="stream-lost"]').is_visible()
        await bounded(page.close(), "closing the page")


async def test_a_failed_migration_shows_its_error_without_document_values(project, db, browser, shots) -> None:  # type: ignore[no-untyped-def]
    project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.2)
    await seed(db.people, 20)
    await db.people.create_index("email", unique=True, sparse=True)
    project.add(NAME, background_file(batch_size=5, extra="adaptive=False, max_document_errors=0,").replace(
        'doc["full_name"] =', 'doc["email"] = "secret-value@example.com"\n    doc["full_name"] ='
    ))
    await command.up(project.settings())
    async with connect(project.settings()) as ms:
        await ms.background.run([NAME])
    async with served(project) as dash:
        page = await bounded(browser.new_page(), "opening a page")
        await page.goto(f"{dash.url}/migrations/{NAME}")
        await page.locator('[data-testid="last-error"]').wait_for(timeout=WAIT_MS)
        text = await page.content()
        assert "max_document_errors" in text and "secret-value" not in text
        await page.screenshot(path=str(shots / "migration-failed.png"), full_page=True)
        await bounded(page.close(), "closing the page")


async def refusal_shown(page: Any) -> None:
    """The dashboard's refusal page is shown and has loaded (its scripts and styles too)."""
    await page.locator('[data-testid="error"]').filter(has_text="refused").wait_for(timeout=WAIT_MS)
    await page.wait_for_load_state("load", timeout=WAIT_MS)


async def test_controls_without_the_token_and_a_forged_cross_site_post_are_refused(registered, db, browser) -> None:  # type: ignore[no-untyped-def]
    async with served(registered) as dash:
        page = await bounded(browser.new_page(), "opening a page")
        await page.goto(f"{dash.url}/migrations/{NAME}")
        control = f"{dash.url}/migrations/{NAME}/control"

        def control_post(r: Any) -> bool:  # the control's answer, not any other POST's
            return r.request.method == "POST" and r.url == control

        async with page.expect_response(control_post, timeout=WAIT_MS) as answer:
            await page.click('[data-testid="control-pause"]', timeout=WAIT_MS)
        assert (await answer.value).status == 403
        await refusal_shown(page)
        # another site's page posting to the dashboard (no CSRF value; its origin is not the dashboard's)
        await page.goto("about:blank", timeout=WAIT_MS)
        await page.set_content(
            f'<form method="post" action="{control}"><input name="action" value="pause">'
            '<button id="go" type="submit">go</button></form>',
            timeout=WAIT_MS,
        )
        async with page.expect_response(control_post, timeout=WAIT_MS) as forged:
            await page.click("#go", timeout=WAIT_MS)
        assert (await forged.value).status == 403
        # the refusal page, loaded in full, before the page closes: closed as soon as the answer's headers came,
        # while the cross-site navigation (from about:blank, in a new renderer) still loaded, its close once did
        # not end on a loaded machine (no request left on the server; Playwright's pipe waiting for the reply)
        await refusal_shown(page)
        state = await bounded(db["_mongoshift_background"].find_one({"_id": NAME}), "reading the migration's state")
        assert state["status"] == "pending"
        await bounded(page.close(), "closing the page")


async def test_a_read_only_dashboard_shows_no_controls(registered, browser, shots) -> None:  # type: ignore[no-untyped-def]
    async with served(registered, read_only=True) as dash:
        page = await bounded(browser.new_page(), "opening a page")
        await page.goto(f"{dash.url}/migrations/{NAME}")
        await page.locator('[data-testid="read-only"]').wait_for(timeout=WAIT_MS)
        assert await page.locator('[data-testid="controls"]').count() == 0
        assert await page.locator("button").count() == 0
        await page.screenshot(path=str(shots / "read-only.png"), full_page=True)
        await bounded(page.close(), "closing the page")


LOGS = """
async def up(ctx):
    ctx.log.info("copying the plans")
    ctx.log.debug("batch 1 of 2")
    ctx.log.warning("a slow batch")
    ctx.log.error("one plan skipped: unknown tier")
"""


async def test_a_runs_log_is_reached_from_the_overview(project, browser, shots) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_plans.py", LOGS)
    report = await command.up(project.settings())
    async with served(project, read_only=True) as dash:
        page = await bounded(browser.new_page(), "opening a page")
        await page.goto(dash.url + "/")
        await page.click('[data-testid="run-link"]')
        await page.locator('[data-testid="run-log"]').wait_for(timeout=WAIT_MS)
        assert page.url == f"{dash.url}/runs/{report.run_id}"
        assert await page.locator('[data-testid="level"]').all_inner_texts() == ["info", "debug", "warning", "error"]
        await page.screenshot(path=str(shots / "run-log.png"), full_page=True)
        await bounded(page.close(), "closing the page")


async def test_the_tenants_view_on_the_overview(tenant_project, sync_client, browser, shots) -> None:  # type: ignore[no-untyped-def]
    await tenants_at_each_state(tenant_project, sync_client)
    async with served(tenant_project, read_only=True) as dash:
        page = await bounded(browser.new_page(), "opening a page")
        await page.goto(dash.url + "/")
        await page.locator('[data-testid="tenants-behind"]').filter(has_text="behind 1").wait_for(timeout=WAIT_MS)
        assert await page.locator("tr[data-tenant]").count() == 2
        await page.screenshot(path=str(shots / "tenants.png"), full_page=True)
        await bounded(page.close(), "closing the page")
