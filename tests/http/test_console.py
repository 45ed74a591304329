"""``/console/`` (D11): the console's files from the package, only when the console is on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path

import httpx
import pytest

from gateway.http.console import CSP
from tests.support.node import start_node

pytestmark = pytest.mark.anyio

CONSOLE = Path(__file__).resolve().parent.parent.parent / "gateway" / "console"
TYPES = {
    "index.html": "text/html; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "folds.js": "text/javascript; charset=utf-8",
    "gateway-client.js": "text/javascript; charset=utf-8",
    "gateway-client.d.ts": "text/plain; charset=utf-8",
}


@pytest.fixture
async def on() -> AsyncIterator[httpx.AsyncClient]:
    async with (
        start_node(None, console=True) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
    ):
        yield client


@pytest.fixture
async def off() -> AsyncIterator[httpx.AsyncClient]:
    async with (
        start_node(None) as node,
        httpx.AsyncClient(base_url=node.url, timeout=10) as client,
    ):
        yield client


def test_every_file_of_the_console_has_a_type() -> None:
    shipped = {p.name for p in CONSOLE.iterdir() if p.is_file() and p.suffix not in (".py", ".pyc")}
    assert shipped == set(TYPES)
    packaged = {i.name for i in resources.files("gateway.console").iterdir()}
    assert set(TYPES) <= packaged


async def test_serves_the_page_and_its_files(on: httpx.AsyncClient) -> None:
    page = await on.get("/console/")
    assert page.status_code == 200
    assert page.content == (CONSOLE / "index.html").read_bytes()
    for name, content_type in TYPES.items():
        r = await on.get(f"/console/{name}")
        assert r.status_code == 200, name
        assert r.headers["content-type"] == content_type, name
        assert r.content == (CONSOLE / name).read_bytes(), name
        assert r.headers["content-security-policy"] == CSP.decode()
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["referrer-policy"] == "no-referrer"
        assert r.headers["cache-control"] == "no-cache"
    # The page loads only from its gateway, and its favicon is a data: URL.
    assert "default-src 'self'" in CSP.decode() and "img-src 'self' data:" in CSP.decode()
    assert "connect-src 'self'" in CSP.decode()


async def test_the_bare_path_redirects_to_the_page(on: httpx.AsyncClient) -> None:
    r = await on.get("/console")
    assert r.status_code == 308
    assert r.headers["location"] == "console/"
    assert (await on.get("/console", follow_redirects=True)).url.path == "/console/"


async def test_nothing_else_is_served(on: httpx.AsyncClient, off: httpx.AsyncClient) -> None:
    unknown = await on.get("/no-such-route")
    assert unknown.status_code == 404
    for path in (
        "/console/__init__.py",
        "/console/no-such.js",
        "/console/..%2fapp.py",
        "/console/%2e%2e/app.py",
        "/console/sub/index.html",
    ):
        r = await on.get(path)
        assert r.status_code == 404, path
        assert r.content == unknown.content, path
    r = await on.post("/console/", content=b"x")
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"


async def test_head_answers_the_headers_only(on: httpx.AsyncClient) -> None:
    r = await on.head("/console/console.js")
    assert r.status_code == 200 and r.content == b""
    assert int(r.headers["content-length"]) == len((CONSOLE / "console.js").read_bytes())
    assert (await on.head("/healthz")).status_code == 200


async def test_off_by_default_like_an_unknown_route(off: httpx.AsyncClient) -> None:
    unknown = await off.get("/no-such-route")
    for path in ("/console", "/console/", "/console/console.js", "/console/index.html"):
        r = await off.get(path)
        assert r.status_code == 404, path
        assert r.content == unknown.content, path
