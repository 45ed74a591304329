"""``/console/``: the console page and the JavaScript client, from the package (D11).

Served only when ``GATEWAY_CONSOLE`` is on (dev mode turns it on); otherwise these
paths are 404 like any unknown route.  The files are the ones in ``gateway/console/``
with a known type, read once; nothing is fetched from elsewhere, and the page's
Content-Security-Policy lets it load and connect to this gateway only (its favicon is a
``data:`` URL).  No token is needed: the page holds nothing secret, it asks for one.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from gateway.errors import NotFound
from gateway.http.route_context import RouteContext
from gateway.net.server import Request, Responder

#: Content types by file suffix; files of other types are not served.
TYPES = {
    ".html": b"text/html; charset=utf-8",
    ".js": b"text/javascript; charset=utf-8",
    ".css": b"text/css; charset=utf-8",
    ".ts": b"text/plain; charset=utf-8",
}
INDEX = "index.html"
CSP = b"default-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'"
HEADERS = [
    (b"content-security-policy", CSP),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    # Always revalidated: a gateway upgraded in place serves its new files at once.
    (b"cache-control", b"no-cache"),
]
NO_SUCH_FILE = "no such route"


@cache
def files() -> dict[str, tuple[bytes, bytes]]:
    """Name -> (content type, bytes) of every servable file of ``gateway.console``."""
    found: dict[str, tuple[bytes, bytes]] = {}
    for item in resources.files("gateway.console").iterdir():
        suffix = "." + item.name.rpartition(".")[2]
        if item.is_file() and suffix in TYPES:
            found[item.name] = (TYPES[suffix], item.read_bytes())
    return found


def _serve(context: RouteContext, responder: Responder, name: str) -> None:
    if not context.settings.console or name not in files():
        raise NotFound(NO_SUCH_FILE)
    content_type, body = files()[name]
    responder.send(200, body, content_type, headers=list(HEADERS))


async def page(
    context: RouteContext, request: Request, responder: Responder, params: dict[str, str]
) -> None:
    """``GET /console/``: the page."""
    _serve(context, responder, INDEX)


async def asset(
    context: RouteContext, request: Request, responder: Responder, params: dict[str, str]
) -> None:
    """``GET /console/<name>``: one of the page's files (or the client's types)."""
    _serve(context, responder, params["name"])


async def redirect(
    context: RouteContext, request: Request, responder: Responder, params: dict[str, str]
) -> None:
    """``GET /console``: to ``/console/``, so that the page's relative URLs resolve."""
    if not context.settings.console:
        raise NotFound(NO_SUCH_FILE)
    # Relative, so that it also holds behind a proxy that serves the gateway under a path.
    responder.send(308, b"", b"text/plain", headers=[(b"location", b"console/")])
