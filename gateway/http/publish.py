"""What every HTTP publish route does before and after the publisher (D4, D5)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from gateway.auth import Principal
from gateway.cursor import Cursor
from gateway.errors import Forbidden, UnsupportedMediaType
from gateway.http.route_context import RouteContext
from gateway.limits import PublishRate
from gateway.net.server import Request, Responder
from gateway.publisher import Via


def start_publish(
    context: RouteContext, request: Request, may_publish: Callable[[Principal], object]
) -> tuple[Principal, PublishRate]:
    """The checks every HTTP publish route makes, in order: a token with the ``publish``
    scope (403), ``may_publish`` (raises NotFound for a feed outside the token's claims),
    a JSON body (415, counted).  Returns the principal and the publish rate the route
    hands to the publisher (``rate=``): HTTP publishing is what the rate limits (D4.5),
    taken with the items in the store's append step (docs/storage.md).
    """
    principal = context.principal(request)
    if "publish" not in principal.scopes:
        raise Forbidden("token lacks the publish scope")
    may_publish(principal)
    try:
        request.require_json()
    except UnsupportedMediaType as exc:
        context.publisher.reject(exc, Via.HTTP)
        raise
    return principal, context.publish_rate


def send_cursors(responder: Responder, cursors: Sequence[Cursor | None]) -> None:
    """``200 {"cursors": [...]}``: one per published item, null for a transient one."""
    answer = [None if c is None else str(c) for c in cursors]
    responder.send(200, msgspec.json.encode({"cursors": answer}))
