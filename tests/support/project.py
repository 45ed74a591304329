"""What the project's own files say, for tests that check the repository against them."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def compiled_modules() -> list[str]:
    """The modules the build compiles (``[tool.hatch.build.targets.wheel.hooks.custom]
    modules``), as paths from the repository's root."""
    hook = pyproject()["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]["custom"]
    return list(hook["modules"])
