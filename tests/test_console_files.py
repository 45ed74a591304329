"""The console's files: shipped in the package, self-contained, and typed.

- ``gateway.console`` is a package whose files ``importlib.resources`` finds (what the
  gateway serves at ``/console/``);
- nothing they load comes from elsewhere: every ``src``/``href`` of the page and every
  ``import`` of its modules names a file of the package, and no file names an
  ``http(s)://`` origin or a web font;
- ``gateway-client.d.ts`` declares every export of ``gateway-client.js`` and compiles
  (``tsc --strict``) against ``tests/js/types_check.ts``, which uses every public API
  and checks that misuse is refused.
"""

from __future__ import annotations

import importlib.resources
import json
import re
import subprocess
from html.parser import HTMLParser

import pytest

from tests.support.jsprocess import JS_DIR, js_packages, node_executable

CONSOLE = importlib.resources.files("gateway.console")
SERVED = {
    "index.html",
    "console.css",
    "console.js",
    "folds.js",
    "gateway-client.js",
    "gateway-client.d.ts",
}


def text(name: str) -> str:
    return CONSOLE.joinpath(name).read_text(encoding="utf-8")


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value is not None:
                self.links.append(value)


def test_the_files_ship_in_the_package() -> None:
    names = {p.name for p in CONSOLE.iterdir() if p.is_file()}
    assert names >= SERVED


def test_the_page_loads_only_its_own_files() -> None:
    parser = _Links()
    parser.feed(text("index.html"))
    local = [link for link in parser.links if not link.startswith("data:")]
    assert sorted(local) == ["console.css", "console.js"]
    imports: set[str] = set()
    for module in ("console.js", "folds.js", "gateway-client.js"):
        found = re.findall(r'^import .* from "([^"]+)";$', text(module), flags=re.M)
        imports |= set(found)
    assert imports == {"./gateway-client.js", "./folds.js"}
    for name in SERVED:
        assert not re.search(r"https?://(?!gw\.example)", text(name)), name
        assert "@import" not in text(name) and "@font-face" not in text(name), name


def test_light_and_dark_and_narrow_screens() -> None:
    css = text("console.css")
    assert "@media (prefers-color-scheme: dark)" in css
    assert re.search(r"@media \(max-width: \d+px\)", css)
    assert 'name="viewport"' in text("index.html")


@pytest.mark.slow
def test_the_types_declare_every_export_and_compile() -> None:
    node = node_executable()
    js_packages()
    listing = subprocess.run(
        [
            node,
            "--input-type=module",
            "-e",
            "const m = await import(process.argv[1]);"
            "console.log(JSON.stringify(Object.keys(m).sort()))",
            str(CONSOLE.joinpath("gateway-client.js")),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    exports = json.loads(listing.stdout)
    declared = re.findall(
        r"^export declare (?:const|function|class) (\w+)", text("gateway-client.d.ts"), re.M
    )
    assert exports == sorted(declared)
    tsc = JS_DIR / "node_modules" / "typescript" / "bin" / "tsc"
    done = subprocess.run(
        [
            node,
            str(tsc),
            "--noEmit",
            "--strict",
            "--target",
            "es2022",
            "--module",
            "es2022",
            "--moduleResolution",
            "bundler",
            "--lib",
            "es2022,dom",
            "types_check.ts",
        ],
        cwd=JS_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
