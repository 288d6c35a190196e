"""docs/surfaces.md's list of the MCP tools is the server's list, and the tools' own
descriptions use only words the reader has met."""

from __future__ import annotations

import re

import pytest

from bus.api import Bus
from bus.surfaces.mcp_server import build_server
from tests.support.paths import REPO

pytestmark = pytest.mark.anyio


def documented_tools() -> list[str]:
    """The tools the MCP bullet of docs/surfaces.md names, in its order."""
    text = (REPO / "docs" / "surfaces.md").read_text(encoding="utf-8")
    bullet = re.search(r"^- \*\*MCP\*\*.*?tools (.*?); the caller", text, re.M | re.S)
    assert bullet is not None, "docs/surfaces.md has no MCP bullet listing tools"
    return re.findall(r"`([a-z_]+)`", bullet.group(1))


async def test_the_documented_tools_are_the_servers(bus: Bus) -> None:
    served = [t.name for t in await build_server(bus).list_tools()]
    assert sorted(documented_tools()) == sorted(served)
    assert len(documented_tools()) == len(set(documented_tools()))


async def test_the_send_tool_says_what_a_handle_resolves_to_in_its_own_words(bus: Bus) -> None:
    [send] = [t for t in await build_server(bus).list_tools() if t.name == "send"]
    assert "prox" not in (send.description or "")
    assert "host:name" in (send.description or "")
