"""The environment for a gateway child process started by a test."""

from __future__ import annotations

import os

from gateway.native import PURE_PYTHON_ENV


def without_settings() -> dict[str, str]:
    """This process's environment without any ``GATEWAY_*`` setting, so a child reads
    only the settings a test gives it; it keeps ``GATEWAY_PURE_PYTHON`` (an import-time
    switch, not a setting), so the child runs the same build of the kernel as the
    test (gateway/native.py)."""
    return {
        k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_") or k == PURE_PYTHON_ENV
    }


def clean_env(**extra: str) -> dict[str, str]:
    """:func:`without_settings`, plus ``extra``."""
    env = without_settings()
    env.update(extra)
    return env
