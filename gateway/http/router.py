"""Routes as data, and the dispatch that serves them.

A :class:`Route` names a path template (the OpenAPI path, ``{param}`` for one segment),
the handler of each method, and how other methods are refused.  Every handler gets the
node's :class:`~gateway.http.route_context.RouteContext`, the request, the responder and the path
parameters.  The router sets ``request.route`` to the matched route's name, which labels
the HTTP metrics.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from gateway.errors import MethodNotAllowed, NotFound
from gateway.http.route_context import RouteContext
from gateway.net.server import Request, Responder

Handler = Callable[[RouteContext, Request, Responder, dict[str, str]], Awaitable[None]]

#: The ``route`` label of requests no route matched.
UNMATCHED = "other"


def compile_template(template: str) -> re.Pattern[str]:
    """``/v1/teams/{team}/events`` -> a pattern whose named groups are the parameters."""
    parts = re.split(r"\{([a-z_]+)\}", template)
    pattern = "".join(
        re.escape(part) if i % 2 == 0 else f"(?P<{part}>[^/]+)" for i, part in enumerate(parts)
    )
    return re.compile(f"^{pattern}$")


@dataclass(frozen=True)
class Route:
    #: Names the route in metrics and docs.
    name: str
    #: The path, as in the OpenAPI document.
    template: str
    #: The handler of each method (upper case).
    methods: Mapping[str, Handler]
    #: The message of the 405 for any other method.
    refuse: str
    #: Methods a CORS preflight (OPTIONS) allows, when CORS is configured; None: no CORS.
    preflight: bytes | None = None
    #: An operational route: no token, ``HEAD`` served like ``GET``.
    public: bool = False
    #: Methods whose handler may answer with a stream or take the connection over: it
    #: runs in a scope the connection's loss cancels (``Responder.cancelled_on_loss``).
    #: The others answer once, every wait of theirs bounded, and run to their end if
    #: the client leaves (no cancel scope per publish: a few us each).
    streams: frozenset[str] = frozenset({"GET", "HEAD"})
    pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pattern", compile_template(self.template))

    @property
    def allow(self) -> str:
        methods = list(self.methods)
        if self.public and "GET" in methods:
            methods.append("HEAD")
        return ", ".join(methods)

    def handler(self, method: str) -> Handler | None:
        found = self.methods.get(method)
        if found is None and method == "HEAD" and self.public:
            found = self.methods.get("GET")
        return found


class Router:
    """Serves ``routes`` in order; the first whose template matches the path wins."""

    def __init__(self, routes: Sequence[Route], context: RouteContext) -> None:
        self.routes = tuple(routes)
        self.context = context

    def match(self, path: str) -> tuple[Route, dict[str, str]] | None:
        for route in self.routes:
            found = route.pattern.match(path)
            if found is not None:
                return route, found.groupdict()
        return None

    async def __call__(self, request: Request, responder: Responder) -> None:
        context = self.context
        matched = self.match(request.path)
        if matched is None:
            request.route = UNMATCHED
            if request.path.startswith("/v1/"):
                # Every /v1 route authenticates first (seed rule 1), unknown ones too.
                context.principal(request)
            elif request.method not in ("GET", "HEAD"):
                raise MethodNotAllowed("only GET is served here", allow="GET, HEAD")
            raise NotFound("no such route")
        route, params = matched
        request.route = route.name
        handler = route.handler(request.method)
        if handler is not None:
            if request.method in route.streams:
                with responder.cancelled_on_loss():
                    await handler(context, request, responder, params)
            else:
                await handler(context, request, responder, params)
        elif request.method == "OPTIONS" and route.preflight and context.cors.enabled:
            context.cors.preflight(request, responder, route.preflight)
        else:
            raise MethodNotAllowed(route.refuse, allow=route.allow)
