"""``inbox doctor``'s checks of the surfaces run beside the bus: the HTTP gateway and the
MCP server, where this user has configured them.

- ``gateway``: the gateway this home's ``inbox serve`` runs (on record while it runs:
  bus.ops.serve_record), and the one ``INBOX_UI_URL`` names when it is not the default
  (where the web inbox's links point: a gateway elsewhere, or behind a proxy).
  ``GET /health`` must answer as the gateway does, with its store reachable, and, with
  ``INBOX_TOKEN`` set, the gateway must take that token (``GET /v1/messages/<id>``: a
  refused token is a 401 naming why; a token it takes gets the message's 404).
- ``mcp``: each ``inbox mcp`` a harness's config starts (bus.ops.mcp_configs) must be
  there to start, answer the MCP handshake, and take its token (its ``receipt`` tool,
  asked of no message, is refused for a bad token before it looks).

Neither set up, the checks cost a few file reads. What each
probe found becomes problem rows in pure functions (:func:`gateway_rows`,
:func:`mcp_rows`; table-driven tests).
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .mcp_configs import ADD, McpEntry, inbox_mcp_entries
from .serve_record import RECORD, recorded

if TYPE_CHECKING:
    from bus.core.settings import Settings

GATEWAY_TIMEOUT_S = 3.0
# A cold ``inbox mcp`` imports the library and the MCP SDK: seconds on a loaded machine.
MCP_TIMEOUT_S = 30.0
# The token refusals (bus.trust.tokens.verify); a token lacking a scope or acting for
# someone else was still taken as genuine.
TOKEN_REFUSED = ("token_malformed", "token_bad_signature", "token_expired", "token_revoked")
# Where a gateway to ask was found: this home's record, or the setting.
SERVED, UI_URL = RECORD, "INBOX_UI_URL"
FIX_UNREACHABLE = {
    SERVED: "start it again with `inbox serve` (it stopped without taking its record "
    "$INBOX_HOME/serve.json away), or remove that file if this home runs no gateway now",
    UI_URL: "start the gateway with `inbox serve` where INBOX_UI_URL points, or set "
    "INBOX_UI_URL to where it runs",
}


@dataclass(frozen=True)
class Probe:
    """What one probe found: ``state`` ``ok``, ``unreachable`` (no answer: ``said`` why),
    ``not_gateway`` / ``no_store`` (an answer, but not a working one) or ``token_refused``
    (``code`` and ``said``: the refusal)."""

    state: str
    said: str = ""
    code: str = ""


def gateway_rows(url: str, source: str, probe: Probe) -> list[dict[str, Any]]:
    """The doctor's rows for the gateway at ``url``, found in ``source`` (:data:`SERVED`
    or :data:`UI_URL`), as ``probe`` found it (none: ok). Pure."""
    if probe.state == "ok":
        return []
    what = (
        "the gateway `inbox serve` runs for this home" if source == SERVED else "the HTTP gateway"
    )
    at = f"{what} at {url} ({source})"
    row: dict[str, Any] = {"check": "gateway", "url": url, "source": source}
    if probe.state == "unreachable":
        row["reason"] = f"{at} does not answer: {probe.said}"
        row["fix"] = FIX_UNREACHABLE[source]
    elif probe.state == "not_gateway":
        row["reason"] = f"what answers at {url} ({source}) is not the inbox's gateway: {probe.said}"
        row["fix"] = "point INBOX_UI_URL at the address `inbox serve` listens on"
    elif probe.state == "no_store":
        row["reason"] = f"{at} answers but cannot reach its store"
        row["fix"] = (
            "start `inbox up`, or give the gateway's `inbox serve` the store's "
            "INBOX_REDIS_URL, then restart it"
        )
    else:
        row["reason"] = f"{at} refuses INBOX_TOKEN ({probe.code}: {probe.said})"
        row["fix"] = (
            "issue a new token (`inbox token issue --session SID --scopes ...`) and set it in "
            "INBOX_TOKEN; a gateway started with another INBOX_SECRET refuses every token "
            "of this one"
        )
        row["error"] = probe.code
    return [row]


def gateways(settings: Settings) -> list[tuple[str, str]]:
    """``(url, source)`` of each gateway to ask: this home's ``inbox serve`` on record,
    and ``INBOX_UI_URL`` when it names another address than its default."""
    found: list[tuple[str, str]] = []
    served = recorded(settings.home)
    if served is not None:
        found.append((served["url"], SERVED))
    default = next(f.default for f in dataclasses.fields(type(settings)) if f.name == "ui_url")
    if settings.ui_url != default and all(
        settings.ui_url.rstrip("/") != url.rstrip("/") for url, _ in found
    ):
        found.append((settings.ui_url, UI_URL))
    return found


def mcp_rows(entry: McpEntry, probe: Probe) -> list[dict[str, Any]]:
    """The doctor's rows for the configured MCP server ``entry`` as ``probe`` found it. Pure."""
    if probe.state == "ok":
        return []
    where = f"the MCP server {entry.name!r} in {entry.config}"
    row: dict[str, Any] = {
        "check": "mcp",
        "harness": entry.harness,
        "config": entry.config,
        "server": entry.name,
        "command": " ".join((entry.command, *entry.args)),
    }
    if probe.state == "unreachable":
        row["reason"] = f"{where} cannot be started: {probe.said}"
        row["fix"] = f"add it again with the inbox installed here: {ADD[entry.harness]}"
    elif probe.state == "no_store":
        row["reason"] = f"{where} cannot reach its store: {probe.said}"
        row["fix"] = (
            "start `inbox up`, or give the server the store's settings (INBOX_HOME, "
            "INBOX_REDIS_URL) in its env"
        )
    else:
        row["reason"] = f"{where} refuses its token ({probe.code}: {probe.said})"
        row["fix"] = (
            "issue a new token (`inbox token issue --session SID --scopes ...`) and set it "
            "as INBOX_TOKEN in the server's env"
        )
        row["error"] = probe.code
    return [row]


def _get(url: str, token: str | None, timeout_s: float) -> tuple[int, Any]:
    """``(status, JSON body or None)`` of ``GET url`` (no proxy: the gateway is ours)."""
    import urllib.error  # only when a gateway is set up: the doctor's start stays quick
    import urllib.request

    request = urllib.request.Request(url, headers={"accept": "application/json"})
    if token:
        request.add_header("authorization", f"Bearer {token}")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout_s) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, None


def probe_gateway(url: str, token: str | None, timeout_s: float = GATEWAY_TIMEOUT_S) -> Probe:
    """Ask the gateway at ``url`` its health, then whether it takes ``token``."""
    from http.client import HTTPException  # a reply cut short, a status line not HTTP's

    base = url.rstrip("/")
    try:
        status, body = _get(f"{base}/health", None, timeout_s)
    except HTTPException as exc:
        return Probe("not_gateway", f"it does not answer HTTP ({type(exc).__name__})")
    except (OSError, ValueError) as exc:  # refused, timed out, no such name, a bad URL
        return Probe("unreachable", str(getattr(exc, "reason", None) or exc))
    if status != 200 or not isinstance(body, dict) or "redis" not in body:
        return Probe("not_gateway", f"GET /health answered {status}")
    if body.get("redis") is False:
        return Probe("no_store")
    if not token:
        return Probe("ok")
    probe_id = f"doctor-{secrets.token_hex(8)}"  # no message has it: the answer is about the token
    try:
        status, body = _get(f"{base}/v1/messages/{probe_id}?by=doctor", token, timeout_s)
    except (OSError, ValueError, HTTPException) as exc:
        return Probe("unreachable", str(getattr(exc, "reason", None) or exc))
    code = body.get("error", "") if isinstance(body, dict) else ""
    if status == 401 and code in TOKEN_REFUSED:
        return Probe("token_refused", str(body.get("message", "")), code)
    return Probe("ok")


def _tool_error(result: Any) -> tuple[str, str]:
    """A tool result's refusal ``(code, message)``; ``("", "")`` for an answer."""
    if not result.is_error:
        return "", ""
    data = result.structured_content
    if isinstance(data, dict):
        return str(data.get("error", "")), str(data.get("message", ""))
    return "error", ""


async def _handshake(entry: McpEntry, env: dict[str, str], errlog: Any) -> Probe:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=entry.command, args=list(entry.args), env=env)
    async with (
        stdio_client(params, errlog=errlog) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        tools = {tool.name for tool in (await client.list_tools()).tools}
        if "receipt" not in tools:
            return Probe("unreachable", "it answers, but has no receipt tool: not this inbox")
        probe_id = f"doctor-{secrets.token_hex(8)}"
        code, said = _tool_error(await client.call_tool("receipt", {"message_id": probe_id}))
    if code in TOKEN_REFUSED:
        return Probe("token_refused", said, code)
    if code in ("unavailable", "store_refused"):
        return Probe("no_store", said, code)
    return Probe("ok")


def probe_mcp(
    entry: McpEntry, environ: Mapping[str, str], timeout_s: float = MCP_TIMEOUT_S
) -> Probe:
    """Start ``entry`` as its harness would (``environ`` with the entry's own env over it),
    speak the MCP handshake and ask its ``receipt`` tool of no message; bounded by
    ``timeout_s``, and stopped after."""
    import shutil
    import tempfile

    import anyio

    env = {**environ, **entry.env}
    found = entry.command if os.path.isabs(entry.command) else None
    found = found or shutil.which(entry.command, path=env.get("PATH"))
    if not found or not os.access(found, os.X_OK):
        return Probe("unreachable", f"{entry.command} is not there (or not executable)")
    with tempfile.TemporaryFile("w+") as errlog:

        async def bounded() -> Probe:
            with anyio.fail_after(timeout_s):
                return await _handshake(entry, env, errlog)

        try:
            return anyio.run(bounded)
        except TimeoutError:
            said = f"no answer to the MCP handshake within {timeout_s:g} s"
        except Exception as exc:  # the server died or spoke no MCP: its stderr says why
            said = f"{type(exc).__name__}: {exc}".rstrip(": ")
        errlog.seek(0)
        last = [line for line in errlog.read().splitlines() if line.strip()][-1:]
    return Probe("unreachable", f"{said}; it said: {last[0][:300]}" if last else said)


def reach_report(
    settings: Settings, environ: Mapping[str, str] | None = None, cwd: Path | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(checked, problems)`` for the gateway and the MCP servers configured here:
    ``checked`` names each one asked (``ok``: it answered as it should), ``problems`` are
    the rows of those that did not."""
    environ = os.environ if environ is None else environ
    checked: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    for url, source in gateways(settings):
        found = gateway_rows(url, source, probe_gateway(url, settings.token))
        checked.append({"check": "gateway", "url": url, "source": source, "ok": not found})
        rows += found
    for entry in inbox_mcp_entries(environ, cwd or Path.cwd()):
        found = mcp_rows(entry, probe_mcp(entry, environ))
        checked.append(
            {"check": "mcp", "config": entry.config, "server": entry.name, "ok": not found}
        )
        rows += found
    return checked, rows


__all__ = [
    "Probe",
    "gateway_rows",
    "gateways",
    "mcp_rows",
    "probe_gateway",
    "probe_mcp",
    "reach_report",
]
