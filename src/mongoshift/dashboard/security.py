"""Who may steer: the shared token (or the mounting application's own identity), CSRF, loopback.

A control needs an operator: either the mounting application's ``identity(request)`` names one
(it authenticated the request itself), or the request carries the token, as the holder's cookie
(set by the sign-in form) or as ``Authorization: Bearer``. Every POST also needs the CSRF value
of its own browser (a random cookie the page repeats in its form, compared in constant time)
and must not come from another site (``Sec-Fetch-Site``, ``Origin``). The token is compared,
never stored in a cookie, a page, a log line or an error.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from starlette.requests import Request

from ..errors import DashboardRefusedError

log = logging.getLogger("mongoshift.dashboard")

#: What the mounting application gives to name the operator of a request (None: not signed in there).
Identity = Callable[[Request], str | Awaitable[str | None] | None]

TOKEN_ENV = "MONGOSHIFT_DASHBOARD_TOKEN"
#: A token shorter than this is refused at start: it would be guessed.
MIN_TOKEN_CHARS = 16
CSRF_COOKIE = "mongoshift_csrf"
HOLDER_COOKIE = "mongoshift_holder"


def is_loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def generated_token() -> str:
    """A fresh token for a loopback dashboard started without one (printed once to its terminal)."""
    return secrets.token_urlsafe(24)


def checked_token(token: str | None) -> str | None:
    """``token`` as given, or the refusal of one too short to be a secret (exit 52; the token is not shown)."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise DashboardRefusedError(f"the dashboard token must be at least {MIN_TOKEN_CHARS} characters long", reason="short_token")
    return token


@dataclass
class Guard:
    """The checks of one dashboard application (see the module's docstring)."""

    token: str | None
    identity: Identity | None = None
    read_only: bool = False
    #: Signs the holder cookie: it proves the token was given here, without being the token.
    _key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)

    def holder_cookie(self) -> str:
        assert self.token is not None
        return hmac.new(self._key, hashlib.sha256(self.token.encode()).digest(), hashlib.sha256).hexdigest()

    def token_matches(self, given: str | None) -> bool:
        return self.token is not None and given is not None and _same(given, self.token)

    def is_holder(self, request: Request) -> bool:
        """The request carries the token: the holder cookie signed here, or ``Authorization: Bearer``."""
        if self.token is None:
            return False
        cookie = request.cookies.get(HOLDER_COOKIE)
        if cookie is not None and _same(cookie, self.holder_cookie()):
            return True
        return self.bearer(request)

    def bearer(self, request: Request) -> bool:
        """The request carries the token in ``Authorization: Bearer``: a script, not a browser. A browser
        never adds that header to a request another site makes it send, so such a POST needs no CSRF value."""
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and self.token_matches(value.strip())

    @staticmethod
    def bearer_sent(request: Request) -> bool:
        """The request carries ``Authorization: Bearer``, right or wrong: a script, whose wrong token is said to be one."""
        return request.headers.get("authorization", "").partition(" ")[0].lower() == "bearer"

    async def operator(self, request: Request) -> str | None:
        """Who steers with this request, for the audit trail: the mounting application's name for its user,
        or ``dashboard <client address>`` for a token holder; None: nobody may."""
        if self.identity is not None:
            try:
                named = self.identity(request)
                if not isinstance(named, str) and named is not None:
                    named = await named
            except Exception as exc:  # the application's own code: it does not vouch (a 500 and a traceback said nothing)
                log.warning("the mounting application's identity(request) raised %s: it names no operator for this request", type(exc).__name__)
                named = None
            if named:
                return str(named)[:128]
        if self.is_holder(request):
            host = request.client.host if request.client else "unknown"
            return f"dashboard {host}"[:128]
        return None

    def sign(self, text: str, page: str) -> str:
        """A signature of a message this dashboard put in a redirect's query for ``page``, so a crafted link cannot
        make a page say something, nor a message signed for one page (one migration's) be shown on another."""
        bound = f"{len(page)}:{page}\n{text}"  # the page's length first: no page and text can make another pair's bytes
        return hmac.new(self._key, bound.encode(), hashlib.sha256).hexdigest()[:32]

    def signed(self, text: str | None, signature: str | None, page: str) -> str | None:
        """``text`` when ``signature`` is this dashboard's for it on ``page``, else None."""
        if text is None or signature is None:
            return None
        return text if _same(self.sign(text, page), signature) else None

    @staticmethod
    def csrf_value(request: Request) -> str:
        """This browser's CSRF value: its cookie, or a fresh one (the response sets it)."""
        return request.cookies.get(CSRF_COOKIE) or secrets.token_urlsafe(24)

    @staticmethod
    def cross_site(request: Request) -> bool:
        """A POST another site made the browser send: ``Sec-Fetch-Site`` says so, or an ``Origin`` of another host."""
        if request.headers.get("sec-fetch-site", "") == "cross-site":
            return True
        origin = request.headers.get("origin")
        if origin is None or origin == "null":
            return origin == "null"
        host = request.headers.get("host", "")
        return origin.split("://", 1)[-1].rstrip("/") != host

    @staticmethod
    def csrf_ok(request: Request, form_value: str | None) -> bool:
        cookie = request.cookies.get(CSRF_COOKIE)
        return cookie is not None and form_value is not None and _same(cookie, form_value)


def _same(given: str, expected: str) -> bool:
    """``given == expected`` in constant time, for any text a request carries: ``hmac.compare_digest`` refuses two
    strings with a non-ASCII character (a crafted ``sig``, a cookie's UTF-8 bytes read as latin-1), which was a 500."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass"))
