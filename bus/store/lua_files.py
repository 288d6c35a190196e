"""The Lua scripts' text, as Redis runs it (no redis-py: the hooks' fast lane reads it too).

A shared step is written once in ``lua/parts/`` and pulled into a script by an
``--@include <part>`` line (docs/decisions/lua-parts.md).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

LUA_DIR = Path(__file__).parent / "lua"
_INCLUDE = re.compile(r"^--@include (\w+)$", re.M)


@cache
def lua_source(name: str) -> str:
    """The text of ``bus/store/lua/<name>.lua`` with each ``--@include <part>`` line replaced by
    ``bus/store/lua/parts/<part>.lua`` (a ``local function`` of its own): a step two scripts
    run (the snapshot in the start and in its own call, the unlock after a notice's
    records, the confirmation of a heard notice) is written once. A part may include
    another (before its own text, so its function is defined first); each part is
    pulled in once. Redis sees one plain script."""
    return _expanded((LUA_DIR / f"{name}.lua").read_text(), set())


def _expanded(text: str, seen: set[str]) -> str:
    def part(m: re.Match[str]) -> str:
        if m[1] in seen:
            return ""
        seen.add(m[1])
        return _expanded((LUA_DIR / "parts" / f"{m[1]}.lua").read_text().rstrip(), seen)

    return _INCLUDE.sub(part, text)


__all__ = ["LUA_DIR", "lua_source"]
