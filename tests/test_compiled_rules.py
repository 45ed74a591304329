"""What code in the compiled modules must not do (CONTRIBUTING.md, "Code in the compiled
modules").

mypyc sets the thread's "exception being handled" (``sys.exc_info()``) for the length of
an ``except`` block, a ``finally`` block that an exception passes through, and an
``__aexit__`` called with an exception, and restores it at their end, in the innermost
exception state it finds: an interpreted coroutine's that wraps the compiled one (as
anyio's task groups do), else the thread's own.  A compiled coroutine that suspends
inside one leaves it set for the rest of its task, or (a task's outermost coroutine)
while every other task runs, and two that interleave can leave it set for good: every
exception raised afterwards takes it as its ``__context__``, so tracebacks name
unrelated failures and each exception keeps the previous ones (and their frames) alive.
Interpreted coroutines keep their own exception state, so this is a rule for the
compiled kernel only (the modules pyproject.toml lists), and it is checked here on their
sources: no wait (``await``, ``async for``, ``async with``, ``yield``) inside an
``except`` or ``finally`` block, and no wait inside the body of an ``async with`` (an
exception from it would reach an ``__aexit__`` that may suspend).
"""

from __future__ import annotations

import ast
import tomllib

import pytest

from tests.support.project import ROOT, compiled_modules

_WAITS = (ast.Await, ast.AsyncFor, ast.AsyncWith, ast.Yield, ast.YieldFrom)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _waits(nodes: list[ast.stmt]) -> list[ast.AST]:
    """The waits in ``nodes``, not counting those of functions defined there."""
    found: list[ast.AST] = []
    stack: list[ast.AST] = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, _SCOPES):
            continue
        if isinstance(node, _WAITS):
            found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return found


def violations(source: str, name: str = "<source>") -> list[str]:
    """Each wait the rule forbids in ``source``, as ``name:line: what``."""
    out: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Try | ast.TryStar):
            for handler in node.handlers:
                for wait in _waits(handler.body):
                    out.append(f"{name}:{wait.lineno}: waits inside an except block")
            for wait in _waits(node.finalbody):
                out.append(f"{name}:{wait.lineno}: waits inside a finally block")
        elif isinstance(node, ast.AsyncWith):
            for wait in _waits(node.body):
                out.append(f"{name}:{wait.lineno}: waits inside an async with")
    return sorted(set(out))


def test_the_compiled_modules_never_wait_while_an_exception_is_handled() -> None:
    modules = compiled_modules()
    assert modules
    found = [v for m in modules for v in violations((ROOT / m).read_text(), m)]
    assert found == []


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("async def f():\n    try:\n        g()\n    except E:\n        await h()\n", "except"),
        ("async def f():\n    try:\n        g()\n    finally:\n        await h()\n", "finally"),
        ("async def f():\n    async with m():\n        await h()\n", "async with"),
        ("def f():\n    try:\n        g()\n    except E:\n        yield 1\n", "except"),
        (
            "async def f():\n    try:\n        g()\n    except E:\n"
            "        async for x in h():\n            pass\n",
            "except",
        ),
    ],
)
def test_the_check_finds_each_forbidden_wait(source: str, what: str) -> None:
    found = violations(source)
    assert len(found) == 1 and what in found[0], found


@pytest.mark.parametrize(
    "source",
    [
        # The wait after the handler, as the compiled modules do it.
        "async def f():\n    failed = None\n    try:\n        await g()\n"
        "    except E as exc:\n        failed = exc\n    if failed:\n        await h()\n",
        # A function defined in a handler waits only when called.
        "async def f():\n    try:\n        g()\n    except E:\n"
        "        async def later():\n            await h()\n",
        # An async with whose body does not wait (a task group's starts).
        "async def f():\n    async with tg() as t:\n        t.start_soon(h)\n",
        # A finally that does not wait.
        "async def f():\n    try:\n        await g()\n    finally:\n        h()\n",
    ],
)
def test_the_check_allows_waits_outside_handlers(source: str) -> None:
    assert violations(source) == []


def test_the_compile_uses_the_locked_mypy_and_msgspec() -> None:
    """The build environment's mypy and msgspec are the versions ``uv.lock`` pins: the
    compile's types are msgspec's own, and its rules mypy's of the lint."""
    tree = ast.parse((ROOT / "hatch_build.py").read_text())
    pins = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "BUILD_DEPENDENCIES" for t in node.targets)
    )
    built = dict(pin.split("==") for pin in pins)
    locked = {
        package["name"]: package["version"]
        for package in tomllib.loads((ROOT / "uv.lock").read_text())["package"]
    }
    for name in ("mypy", "msgspec"):
        assert built[name] == locked[name], name
