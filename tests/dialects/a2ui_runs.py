"""Hand-written A2UI v0.9 message streams (test fixtures).

Components are of the basic catalogue, so the reference processor (``@a2ui/web_core``)
checks them as a renderer would.  ``SURFACES`` runs three surfaces through every
operation: components merged by id (a replaced one, one whose type changes), data
written and removed at every depth, a surface deleted, one deleted and created again.
``DATA_EDGES`` writes the data model where JavaScript semantics show (array holes,
removal inside an array, removing the whole model then writing below it).
``REFUSED`` holds writes the reference refuses (the fold leaves the data as it was).
"""

from __future__ import annotations

from typing import Any

Message = dict[str, Any]
CATALOG = "https://a2ui.org/specification/v0_9/basic_catalog.json"
OTHER_CATALOG = "example.com:forms"


def create(surface: str, catalog: str = CATALOG) -> Message:
    return {"createSurface": {"surfaceId": surface, "catalogId": catalog}}


def components(surface: str, *items: dict[str, Any]) -> Message:
    return {"updateComponents": {"surfaceId": surface, "components": list(items)}}


def data(
    surface: str, path: str | None = None, value: Any = None, op: str | None = None
) -> Message:
    body: dict[str, Any] = {"surfaceId": surface}
    if path is not None:
        body["path"] = path
    if op is not None:
        body["op"] = op
    if op != "remove":
        body["value"] = value
    return {"updateDataModel": body}


def delete(surface: str) -> Message:
    return {"deleteSurface": {"surfaceId": surface}}


def text(ident: str, content: Any) -> dict[str, Any]:
    return {"id": ident, "component": "Text", "text": content}


SURFACES: list[Message] = [
    create("profile"),
    components(
        "profile",
        {"id": "root", "component": "Column", "children": ["title", "name", "go"]},
        text("title", "Profile"),
        text("name", {"path": "/user/name"}),
    ),
    data("profile", "/user", {"name": "Ada", "langs": ["en"]}),
    create("scratch", OTHER_CATALOG),
    components("scratch", {"id": "root", "component": "Card", "child": "note"}, text("note", "x")),
    components(
        "profile",
        text("title", "Your profile"),
        {
            "id": "go",
            "component": "Button",
            "child": "go-label",
            "action": {"event": {"name": "go"}},
        },
        text("go-label", "Go"),
    ),
    data("profile", "/user/name", "Grace", op="replace"),
    data("profile", "/user/langs/1", "fr", op="add"),
    data("scratch", value={"draft": True}),
    delete("scratch"),
    components("profile", {"id": "title", "component": "Divider", "axis": "horizontal"}),
    data("profile", "/user/age", 36),
    data("profile", "/user/age", op="remove"),
    create("banner"),
    components("banner", {"id": "root", "component": "Row", "children": []}),
    delete("banner"),
    create("banner", OTHER_CATALOG),
    components("banner", text("root", "Welcome back")),
    data("banner", "/", {"seen": 1}),
    create("scratch"),
]

DATA_EDGES: list[Message] = [
    create("edges"),
    components("edges", text("root", {"path": "/list/0"})),
    data("edges", "/list/3", "d"),
    data("edges", "/list/1", op="remove"),
    data("edges", "/grid/0/1", "x"),
    data("edges", "/a~1b/c~0d", 1),
    data("edges", "/deep/path/", {"k": None}),
    data("edges", "/deep/path/k/v", 2),
    data("edges", "", [1, 2]),
    data("edges", "/5", "far"),
    data("edges", "/", op="remove"),
    data("edges", "/fresh/0", "after the whole model was removed"),
]

#: Writes the reference refuses, each after which the data model must be unchanged.
REFUSED: list[Message] = [
    create("strict"),
    data("strict", "/n", 1),
    data("strict", "/n/deeper", 2),
    data("strict", "/list", [1]),
    data("strict", "/list/name", 3),
    data("strict", "/list/x/y", 4),
    data("strict", "/__proto__/polluted", 5),
    data("strict", "/constructor", 6),
    data("strict", "/ok", 7),
]
REFUSED_AT = [2, 4, 5, 6, 7]

ALL_STREAMS: dict[str, list[Message]] = {
    "surfaces": SURFACES,
    "data-edges": DATA_EDGES,
    "refused": REFUSED,
}
