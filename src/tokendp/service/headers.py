"""Browser hardening: security headers, added by an ASGI middleware around the whole app.

Every response says ``X-Content-Type-Options: nosniff``. The page (``/``) and its static files
(``/static/...``) also get :data:`CSP`: script, style and fetch from this origin only (no inline
script or style, no eval), nothing else at all (no plugins, no ``<base>``, no form submission,
no framing), and DOM sinks such as ``innerHTML`` refused through Trusted Types (the page uses
none). ``X-Frame-Options: DENY`` covers browsers without ``frame-ancestors`` and
``Referrer-Policy: no-referrer`` keeps the page's address out of other sites' logs. The Swagger
UI (``/docs``, only with ``tokendp serve --docs``) loads its script from a CDN and gets no CSP.
"""

from __future__ import annotations

CSP = "; ".join([
    "default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "object-src 'none'",
    "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'", "require-trusted-types-for 'script'",
    "trusted-types 'none'",
])
EVERY_RESPONSE = [(b"x-content-type-options", b"nosniff")]
PAGE = [(b"content-security-policy", CSP.encode()), (b"x-frame-options", b"DENY"), (b"referrer-policy", b"no-referrer")]


class SecurityHeaders:
    """ASGI middleware: adds the headers above to each HTTP response's start."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        extra = EVERY_RESPONSE + (PAGE if is_page(scope["path"]) else [])

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        return await self.app(scope, receive, send_with_headers)


def is_page(path: str) -> bool:
    return path == "/" or path.startswith("/static/")
