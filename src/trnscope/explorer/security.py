"""Access control for the explorer.

Bound to loopback (the default) the explorer is reachable only from this machine; to stop a web
page in the user's browser from reaching it through DNS rebinding, requests must also name a
loopback host in their ``Host`` header. Bound to any other address it requires a token on every
request: ``?token=`` in the URL the explorer prints (which then sets a same-site cookie, so the
page's own requests carry it), the cookie, or an ``Authorization: Bearer`` header. Tokens are
compared in constant time.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from http.cookies import SimpleCookie
from urllib.parse import parse_qs

COOKIE = "trnscope_token"
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# A token guards every profile the explorer serves; one short enough to guess is no guard.
MIN_TOKEN_LENGTH = 16


def new_token() -> str:
    return secrets.token_urlsafe(24)


def check_token(token: str | None) -> None:
    """ValueError for a token too short (or of characters a URL would mangle) to protect anything."""
    if token is None:
        return
    if len(token) < MIN_TOKEN_LENGTH:
        raise ValueError(f"the access token must have at least {MIN_TOKEN_LENGTH} characters (got {len(token)}); "
                         f"leave --token out to get a random one")
    if not token.isascii() or not token.isprintable() or any(c in token for c in " &#%?/;="):
        raise ValueError("the access token may hold only letters, digits and -._~ (it is put in a URL)")


class TokenMiddleware:
    """Pure ASGI middleware: 401 for HTTP requests without the token."""

    def __init__(self, app, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from_query = self._from_query(scope)
        if from_query is not None and self._valid(from_query):
            await self.app(scope, receive, self._setting_cookie(send))
            return
        if self._valid(self._from_headers(scope)):
            await self.app(scope, receive, send)
            return
        await _respond(send, 401, b"This trnscope explorer needs its access token: open the URL it printed "
                                  b"(it ends in ?token=...).\n")

    def _valid(self, candidate: str | None) -> bool:
        return candidate is not None and hmac.compare_digest(candidate.encode(), self.token)

    @staticmethod
    def _from_query(scope) -> str | None:
        values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token")
        return values[0] if values else None

    @staticmethod
    def _from_headers(scope) -> str | None:
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                text = value.decode("latin-1")
                if text.lower().startswith("bearer "):
                    return text[7:].strip()
            elif name == b"cookie":
                cookie = SimpleCookie()
                try:
                    cookie.load(value.decode("latin-1"))
                except Exception:  # noqa: BLE001 - a malformed cookie header is just no token
                    continue
                if COOKIE in cookie:
                    return cookie[COOKIE].value
        return None

    def _setting_cookie(self, send):
        cookie = f"{COOKIE}={self.token.decode()}; Path=/; HttpOnly; SameSite=Strict".encode()

        async def wrapped(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie)]}
            await send(message)

        return wrapped


class LoopbackHostMiddleware:
    """Refuses requests whose Host header is not a loopback name (DNS-rebinding defence)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            host = dict(scope.get("headers", [])).get(b"host", b"").decode("latin-1")
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if not is_loopback(name):
                await _respond(send, 403, b"This explorer only answers requests addressed to localhost.\n")
                return
        await self.app(scope, receive, send)


# Everything the page loads comes from this server: no CDN, and no inline script but the ones
# named by hash (the boot script, see assets.py). no-referrer keeps a token in the URL from leaking
# to any link target; frame-ancestors stops other sites framing it.
def security_headers(script_hashes: tuple[str, ...] = ()) -> list[tuple[bytes, bytes]]:
    scripts = " ".join(["'self'", *(f"'{h}'" for h in script_hashes)])
    return [
        (b"content-security-policy", f"default-src 'self'; script-src {scripts}; worker-src 'self'; connect-src 'self'; "
                                     f"style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'".encode()),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
    ]


SECURITY_HEADERS = security_headers()


class SecurityHeadersMiddleware:
    def __init__(self, app, script_hashes: tuple[str, ...] = ()) -> None:
        self.app = app
        self.headers = security_headers(script_hashes)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *self.headers]}
            await send(message)

        await self.app(scope, receive, with_headers)


async def _respond(send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
