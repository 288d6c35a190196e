"""``inbox mcp`` as a real stdio subprocess, driven by the MCP SDK's own client, and the
checks every MCP test makes of a tool's answer."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult

from bus.core.settings import Settings
from tests.support.paths import REPO


@asynccontextmanager
async def mcp_client(
    s: Settings, session: str | None, *, dispatcher: str | None = "none"
) -> AsyncIterator[ClientSession]:
    env = s.child_env()
    if session:
        env["INBOX_SESSION"] = session
    if dispatcher is not None:
        env["INBOX_DISPATCHER"] = dispatcher
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "bus.surfaces.cli.app", "mcp"], env=env, cwd=str(REPO)
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        yield client


async def call(client: ClientSession, tool: str, **args: Any) -> CallToolResult:
    result = await client.call_tool(tool, args, read_timeout_seconds=30)
    assert isinstance(result, CallToolResult)
    return result


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    data = result.structured_content
    assert data is not None
    # The text block carries the same JSON the CLI prints.
    assert json.loads(result.content[-1].text) == data  # type: ignore[union-attr]
    return data


def error_text(result: CallToolResult) -> str:
    assert result.is_error
    return " ".join(getattr(c, "text", "") for c in result.content)
