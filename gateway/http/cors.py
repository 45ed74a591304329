"""CORS for the SSE routes (docs/contract.md D8): off unless ``GATEWAY_CORS_ORIGINS`` lists
the origins a browser page may read them from (``*``: any)."""

from __future__ import annotations

from gateway.net.server import Request, Responder


class Cors:
    def __init__(self, origins: str) -> None:
        #: Origins allowed to read the SSE routes from a browser; empty: none.
        self.origins = frozenset(o.strip() for o in origins.split(",") if o.strip())

    @property
    def enabled(self) -> bool:
        return bool(self.origins)

    def allowed_origin(self, request: Request) -> str | None:
        origin = request.headers.get("origin")
        if origin is None or not self.origins:
            return None
        if "*" in self.origins or origin in self.origins:
            return origin
        return None

    def headers(self, request: Request) -> list[tuple[bytes, bytes]]:
        """The response headers that let an allowed origin read the response."""
        origin = self.allowed_origin(request)
        if origin is None:
            return []
        return [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"vary", b"Origin"),
        ]

    def preflight(self, request: Request, responder: Responder, methods: bytes) -> None:
        """Answer a browser's CORS preflight for ``methods`` of an SSE route."""
        headers = self.headers(request)
        if headers:
            headers += [
                (b"access-control-allow-methods", methods),
                (
                    b"access-control-allow-headers",
                    b"Authorization, Last-Event-ID, Content-Type",
                ),
                (b"access-control-max-age", b"600"),
            ]
        responder.send(204, b"", headers=headers)
