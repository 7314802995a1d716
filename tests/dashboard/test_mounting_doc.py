"""docs/dashboard.md's "Mounting it in your service", run as written: the FastAPI service the doc gives, on a project.

The example named a client it never made (``client=app_client``), so it failed as copied with a ``NameError``. The
test runs the doc's block itself, then steers through the mount as the example's signed-in admin and as nobody.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import NAME, csrf_of

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

DOC = Path(__file__).resolve().parents[2] / "docs" / "dashboard.md"


def mounting_example() -> str:
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL) if "app.mount(" in b]
    return block


class Admin:
    email = "ada@example.com"
    is_admin = True


async def test_the_mounting_example_runs_as_written(registered, db, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("fastapi", reason="the doc's example is a FastAPI service (the test extra installs FastAPI)")
    monkeypatch.chdir(registered.root)  # the example's load_settings() reads the project's mongoshift.toml, as a service would
    example: dict[str, Any] = {"__name__": "service"}
    exec(compile(mounting_example(), str(DOC), "exec"), example)
    app = example["app"]

    @app.middleware("http")
    async def signed_in(request: Any, call_next: Any) -> Any:  # "your authentication", as the example's comment says
        if request.headers.get("x-signed-in") == "admin":
            request.state.user = Admin()
        return await call_next(request)

    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://service.test") as web:
            page = await web.get(f"/ops/migrations/migrations/{NAME}")
            assert page.status_code == 200 and 'action="/ops/migrations/static/' not in page.text
            assert 'href="/ops/migrations/static/dashboard.css"' in page.text
            assert 'name="token"' not in page.text  # token=None: no sign-in form, only the service's own sign-in
            csrf = csrf_of(page.text)
            form = {"csrf": csrf, "action": "pause", "reason": "from the service"}
            nobody = await web.post(f"/ops/migrations/migrations/{NAME}/control", data=form)
            assert nobody.status_code == 403
            admin = await web.post(f"/ops/migrations/migrations/{NAME}/control", data=form, headers={"x-signed-in": "admin"})
            assert admin.status_code == 303 and admin.headers["location"].startswith(f"/ops/migrations/migrations/{NAME}?said=pause")
    state = await db["_mongoshift_background"].find_one({"_id": NAME})
    assert state["status"] == "paused"
    assert (state["history"][-1]["by"], state["history"][-1]["reason"]) == ("ada@example.com", "from the service")
    assert example["dashboard"].state.dashboard._poller is None  # the example's lifespan closed the dashboard
