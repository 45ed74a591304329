"""Write the settings table into docs/settings.md between its settings markers.

Run ``uv run python scripts/gen_settings_doc.py``; ``--check`` fails if it is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gateway.config import ENV_ONLY, SETTINGS_HELP, Settings, env_name, flag_name

TARGET = Path(__file__).resolve().parent.parent / "docs" / "settings.md"
BEGIN, END = "<!-- settings:begin -->", "<!-- settings:end -->"


def table() -> str:
    defaults = Settings()
    rows = ["| flag | variable | default | meaning |", "|---|---|---|---|"]
    for name, text in SETTINGS_HELP.items():
        value = getattr(defaults, name)
        shown = "unset" if value is None else f"`{value}`"
        flag = "(environment only)" if name in ENV_ONLY else f"`{flag_name(name)}`"
        rows.append(f"| {flag} | `{env_name(name)}` | {shown} | {text} |")
    return "\n".join(rows)


def render(doc: str) -> str:
    """``doc`` with the table between its markers written anew from the code."""
    head, _, rest = doc.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main() -> int:
    text = TARGET.read_text()
    new = render(text)
    if "--check" in sys.argv:
        return 0 if new == text else 1
    TARGET.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
